// The shared "any allocator" bodies for managed memory: written through its own pointer by the host, read back in a
// stream's order. Not shareable between processes: no allocation stands behind it to export.
#include "any_allocator.hpp"

namespace {
struct managed_memory : pvmm_test::any_allocator::host_visible_memory {
  static constexpr const char* name = "managed";
  using block = pvmm::managed_allocation;
  static std::string unavailable() {
    if (auto why = pvmm_test::no_device_reason(); !why.empty()) return why;
    if (!pvmm_test::caps().managed.supported) return "the device lacks managed memory";
    // As the managed cases: far from any device's limit (a managed request near it can hang a GPU).
    return pvmm::query_memory(0).value().free >= (std::size_t{256} << 20) ? std::string()
                                                                          : "the device lacks 256 MiB of free memory";
  }
  static pvmm::errc impossible_size_error() { return pvmm::errc::out_of_memory; }
  static pvmm::result<block> allocate(std::size_t size) { return pvmm::managed_allocation::create(size); }
  static void* address(const block& b) { return b.data(); }
  static pvmm::status release(block& b) { return b.release(); }
  static pvmm::result<view> share(const block& b) { return share_address(b.data()); }
};
}  // namespace

TEST_SUITE("managed") { PVMM_ANY_ALLOCATOR_CASES(managed_memory) }
