// The shared "any allocator" bodies for stream-ordered pool memory, both ways a pool hands it out: owned
// pool_allocations (memory_pool::allocate, freed by free_async), and raw pointers (allocate_async, freed through the
// pool). Data moves in the stream's order; sharing goes through a pool export, imported back in this process.
#include "any_allocator.hpp"
#include "memory_kinds.hpp"

namespace {
using pvmm_test::any_allocator::stream_read;
using pvmm_test::any_allocator::stream_write;

/// A pool of device 0 (exportable where the device can share pools) and the stream its memory is used on.
struct pool_memory {
  pvmm::stream on = pvmm::stream::create(0).value();
  pvmm::memory_pool pool = pvmm::memory_pool::create([] {
                             pvmm::pool_properties p;
                             if (shareable()) p.exportable = pvmm::handle_types::posix_fd;
                             return p;
                           }())
                               .value();

  static std::string unavailable() {
    if (auto why = pvmm_test::no_device_reason(); !why.empty()) return why;
    return pvmm_test::caps().pools.supported ? std::string() : "the device lacks memory pools";
  }
  static std::size_t unit() { return std::size_t{64} << 10; }
  static bool whole_units_only() { return false; }  // any size; the pool rounds it
  static pvmm::errc impossible_size_error() { return pvmm::errc::out_of_memory; }
  // Imported back into its own exporting process, a pool kept 32 MiB of device memory and one fd after both pools
  // and every allocation were gone (CUDA 13.0, H100, 2026-11-24): so on the GPUs this body shares nothing and
  // checks the refusal of a pool made without handle types; pools cross processes in pool/sharing.cpp.
  static bool shareable() { return pvmm_test::caps().pools.ipc_posix_fd && pvmm_test::host_backend(); }
  static pvmm::errc unshareable_error() { return pvmm::errc::handle_type_not_requested; }

  void write(void* at, const std::vector<std::uint32_t>& words) { stream_write(on, at, words); }
  std::vector<std::uint32_t> read(const void* at, std::size_t bytes) { return stream_read(on, at, bytes); }

  /// The pool imported back and the allocation imported into it: the allocation goes first (declared last).
  struct view {
    pvmm::memory_pool imported;
    pvmm::pool_allocation memory;
  };
  static void* view_address(const view& v) { return v.memory.data(); }
  /// Exports the pool and `pointer` (complete: synchronized first), and imports both back.
  pvmm::result<view> share_pointer(const void* pointer) {
    if (auto done = on.synchronize(); !done) return std::move(done).error();
    auto exported = pool.export_posix_fd();
    if (!exported) return std::move(exported).error();
    auto record = pool.export_pointer(pointer);
    if (!record) return std::move(record).error();
    auto imported = pvmm::memory_pool::import_posix_fd(*exported, 0);
    if (!imported) return std::move(imported).error();
    auto memory = imported->import_pointer(*record, on);
    if (!memory) return std::move(memory).error();
    return view{std::move(*imported), std::move(*memory)};
  }
};

/// Owned pool allocations.
struct pool_allocations : pool_memory {
  static constexpr const char* name = "pool allocations";
  using block = pvmm::pool_allocation;
  static pvmm::errc released_again_error() { return pvmm::errc::already_released; }
  pvmm::result<block> allocate(std::size_t size) { return pool.allocate(size, on); }
  static void* address(const block& b) { return b.data(); }
  pvmm::status release(block& b) { return b.free_async(on); }
  pvmm::result<view> share(const block& b) { return share_pointer(b.data()); }
};

/// Raw pointers from allocate_async, each held by a small owner the test writes (as an allocator adaptor would).
struct pool_pointers : pool_memory {
  static constexpr const char* name = "pool raw pointers";
  using block = pvmm_test::any_allocator::raw_block<pool_pointers>;
  pvmm::status give_back(void* data) { return pool.free_async(data, on); }
  /// The pool refuses a pointer it does not hold live, as memory_pool.hpp says (one freed already included).
  static pvmm::errc released_again_error() { return pvmm::errc::invalid_argument; }
  pvmm::result<block> allocate(std::size_t size) { return block::of(this, pool.allocate_async(size, on)); }
  static void* address(const block& b) { return b.data; }
  pvmm::status release(block& b) { return b.release(); }
  pvmm::result<view> share(const block& b) { return share_pointer(b.data); }
};
}  // namespace

TEST_SUITE("pool") {
  PVMM_ANY_ALLOCATOR_CASES(pool_allocations)
  PVMM_ANY_ALLOCATOR_CASES(pool_pointers)
}
