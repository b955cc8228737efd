// The shared "any allocator" bodies for VMM memory: physical memory mapped into its own reservation and granted
// to device 0.
#include "any_allocator.hpp"

namespace {
struct vmm_memory {
  static constexpr const char* name = "vmm";
  struct block {
    pvmm::physical_allocation memory;
    pvmm::address_reservation range;
  };
  static std::string unavailable() { return pvmm_test::no_device_reason(); }
  static std::size_t unit() { return pvmm_test::granule(); }
  static pvmm::result<block> map(pvmm::physical_allocation memory, std::size_t size) {
    auto range = pvmm::address_reservation::reserve(size);
    if (!range) return std::move(range).error();
    if (auto p = range->map_and_grant(0, memory, 0, size, {pvmm_test::rw()}); !p) return std::move(p).error();
    return block{std::move(memory), std::move(*range)};
  }
  static pvmm::result<block> allocate(std::size_t size) {
    auto memory = pvmm::physical_allocation::create(size, pvmm_test::default_properties());
    if (!memory) return std::move(memory).error();
    return map(std::move(*memory), size);
  }
  static void* address(const block& b) { return b.range.address(); }
  static pvmm::status free(block& b) {
    if (!b.range.valid()) return b.memory.release();  // already_released, as the allocation says
    if (auto ok = b.range.unmap(0, b.range.size()); !ok) return ok;
    if (auto ok = b.range.release(); !ok) return ok;
    return b.memory.release();
  }
  static bool shareable() { return pvmm_test::caps().sharing.posix_fd; }
  static pvmm::result<pvmm::owned_fd> export_fd(const block& b) { return b.memory.export_posix_fd(); }
  static pvmm::result<block> import_fd(int fd, std::size_t size) {
    auto memory = pvmm::physical_allocation::import_posix_fd(fd, size);
    if (!memory) return std::move(memory).error();
    return map(std::move(*memory), size);
  }
};
}  // namespace

TEST_SUITE("vmm") { PVMM_ANY_ALLOCATOR_CASES(vmm_memory) }
