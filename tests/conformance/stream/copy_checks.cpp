// copy_async checks both of its ranges before anything is enqueued (invariant 31, issue 47 item 4): a copy from a
// reservation's unmapped part, past the end of pvmm's memory, or wrapping the address space is refused on every
// backend; on the host backend (a memcpy on the stream's thread) so are garbage and read-only ranges.
#include "memory_kinds.hpp"

using namespace pvmm;
using namespace pvmm_test;

TEST_SUITE("stream") {
  PVMM_CASE("copy_async refuses an unmapped, overrunning or wrapping range before enqueueing anything") {
    PVMM_REQUIRE_DEVICE();
    auto s = stream::create(0).value();
    auto pinned = pinned_allocation::create(4096).value();
    const std::size_t g = granule();
    auto range = address_reservation::reserve(2 * g).value();
    auto memory = physical_allocation::create(g, default_properties(0)).value();
    const access_descriptor rw{location::device(0), access::read_write};
    void* mapped = range.map_and_grant(0, memory, {rw}).value();
    auto* unmapped = static_cast<unsigned char*>(mapped) + g;
    PVMM_CHECK_ERRC(s.copy_async(pinned.data(), unmapped, 64), errc::not_mapped);
    PVMM_CHECK_ERRC(s.copy_async(unmapped, pinned.data(), 64), errc::not_mapped);
    PVMM_CHECK_ERRC(s.copy_async(pinned.data(), static_cast<unsigned char*>(mapped) + g - 32, 64), errc::not_mapped);
    auto* pinned_end = static_cast<unsigned char*>(pinned.data()) + 4096 - 16;
    PVMM_CHECK_ERRC(s.copy_async(mapped, pinned_end, 64), errc::out_of_range);
    PVMM_CHECK_ERRC(s.copy_async(pinned.data(), mapped, SIZE_MAX), errc::out_of_range);
    // The checks pass what is right: a copy within the mapping and the pinned memory runs.
    PVMM_CHECK_OK(s.copy_async(mapped, pinned.data(), 4096));
    PVMM_CHECK_OK(s.synchronize());
  }

  PVMM_CASE("host backend: copy_async refuses memory the process cannot read or write") {
    PVMM_REQUIRE_DEVICE();
    PVMM_REQUIRE_HOST_BACKEND("the host backend's worker runs the copy as a memcpy; the drivers check their own");
    auto s = stream::create(0).value();
    auto pinned = pinned_allocation::create(4096).value();
    const std::size_t g = granule();
    auto range = address_reservation::reserve(g).value();
    auto memory = physical_allocation::create(g, default_properties(0)).value();
    const access_descriptor ro{location::device(0), access::read};
    void* read_only = range.map_and_grant(0, memory, {ro}).value();
    PVMM_CHECK_ERRC(s.copy_async(read_only, pinned.data(), 64), errc::not_permitted);
    PVMM_CHECK_OK(s.copy_async(pinned.data(), read_only, 64));  // reading it is fine
    PVMM_CHECK_ERRC(s.copy_async(pinned.data(), reinterpret_cast<const void*>(0x10), 64), errc::not_mapped);
    PVMM_CHECK_ERRC(s.copy_async(reinterpret_cast<void*>(0x10), pinned.data(), 64), errc::not_mapped);
    PVMM_CHECK_OK(s.synchronize());
  }
}  // TEST_SUITE
