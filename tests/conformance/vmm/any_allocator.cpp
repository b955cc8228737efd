// The shared "any allocator" bodies for VMM memory: physical memory mapped into its own reservation and granted
// to device 0; shared through a POSIX fd of the allocation, mapped again.
#include "any_allocator.hpp"

namespace {
struct vmm_memory {
  static constexpr const char* name = "vmm";
  struct block {
    pvmm::physical_allocation memory;
    pvmm::address_reservation range;
  };
  using view = block;
  static std::string unavailable() { return pvmm_test::no_device_reason(); }
  static std::size_t unit() { return pvmm_test::granule(); }
  static bool whole_units_only() { return true; }
  static pvmm::errc impossible_size_error() { return pvmm::errc::out_of_memory; }
  static pvmm::errc released_again_error() { return pvmm::errc::already_released; }
  static bool shareable() { return pvmm_test::caps().sharing.posix_fd; }
  static pvmm::errc unshareable_error() { return pvmm::errc::handle_type_not_requested; }

  static pvmm::result<block> map(pvmm::physical_allocation memory, std::size_t size) {
    auto range = pvmm::address_reservation::reserve(size);
    if (!range) return std::move(range).error();
    if (auto p = range->map_and_grant(0, memory, 0, size, {pvmm_test::rw()}); !p) return std::move(p).error();
    return block{std::move(memory), std::move(*range)};
  }
  pvmm::result<block> allocate(std::size_t size) {
    auto memory = pvmm::physical_allocation::create(size, pvmm_test::default_properties());
    if (!memory) return std::move(memory).error();
    return map(std::move(*memory), size);
  }
  static void* address(const block& b) { return b.range.address(); }
  static void* view_address(const view& v) { return v.range.address(); }
  void write(void* at, const std::vector<std::uint32_t>& words) { pvmm_test::write_words(at, words); }
  std::vector<std::uint32_t> read(const void* at, std::size_t bytes) { return pvmm_test::read_words(at, bytes); }
  pvmm::status release(block& b) {
    if (!b.range.valid()) return b.memory.release();  // already_released, as the allocation says
    if (auto ok = b.range.unmap(0, b.range.size()); !ok) return ok;
    if (auto ok = b.range.release(); !ok) return ok;
    return b.memory.release();
  }
  pvmm::result<view> share(const block& b) {
    auto fd = b.memory.export_posix_fd();
    if (!fd) return std::move(fd).error();
    auto memory = pvmm::physical_allocation::import_posix_fd(fd->get(), b.memory.size());
    if (!memory) return std::move(memory).error();
    return map(std::move(*memory), b.memory.size());
  }
};
}  // namespace

TEST_SUITE("vmm") { PVMM_ANY_ALLOCATOR_CASES(vmm_memory) }
