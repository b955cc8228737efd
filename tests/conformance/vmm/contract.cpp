// The same contract everywhere: what one driver refuses and another allows is a capability, checked before any
// driver call; and the calls client programs need to stay portable.
#include "support.hpp"

using namespace pvmm;
using namespace pvmm_test;

TEST_SUITE("vmm") {
  PVMM_CASE("mapping the first part of an allocation works exactly where the capability says so") {
    PVMM_REQUIRE_DEVICE();
    const std::size_t g = granule();
    auto memory = physical_allocation::create(default_properties(), 2 * g).value();
    auto range = address_reservation::reserve(g).value();
    const bool partial = caps().vmm.map_part_of_allocation;  // asked before counting: it is a backend call
    const std::size_t calls = testing::backend_call_count();
    auto p = range.map(0, memory, 0, g);
    if (partial) {
      REQUIRE_MESSAGE(p, p.error().message());
      range.set_access(0, g, {rw()}).value();
      write_words(*p, pattern(g, 61));
      CHECK(read_words(*p, g) == pattern(g, 61));
    } else {
      PVMM_CHECK_ERRC(p, errc::not_supported);
      CHECK_MESSAGE(testing::backend_call_count() == calls, "the refusal reached the driver");
      CHECK(range.mapping_count() == 0);
    }
  }

  PVMM_CASE("map and map_and_grant of a whole allocation take just the offset and the memory") {
    PVMM_REQUIRE_DEVICE();
    const std::size_t g = granule();
    auto memory = physical_allocation::create(default_properties(), 2 * g).value();
    auto range = address_reservation::reserve(4 * g).value();
    void* p = range.map_and_grant(2 * g, memory, {rw()}).value();
    CHECK(p == range.at(2 * g));
    write_words(p, pattern(2 * g, 62));
    CHECK(read_words(p, 2 * g) == pattern(2 * g, 62));
    PVMM_CHECK_OK(range.unmap(2 * g, 2 * g));
    PVMM_CHECK_OK(range.map(0, memory));
    PVMM_CHECK_ERRC(range.map(g, memory), errc::overlapping_mapping);
  }

  PVMM_CASE("can_access_peer: a device reaches its own memory; every pair answers; bad ordinals are refused") {
    PVMM_REQUIRE_DEVICE();
    const int n = device_count().value();
    for (int d = 0; d < n; ++d) {
      CHECK(can_access_peer(d, d).value());
      for (int peer = 0; peer < n; ++peer) PVMM_CHECK_OK(can_access_peer(d, peer));
    }
    PVMM_CHECK_ERRC(can_access_peer(0, n), errc::invalid_device);
    PVMM_CHECK_ERRC(can_access_peer(-1, 0), errc::invalid_device);
  }
}  // TEST_SUITE
