// The same contract everywhere: what one driver refuses and another allows is a capability, checked before any
// driver call; and the calls client programs need to stay portable.
#include "support.hpp"

using namespace pvmm;
using namespace pvmm_test;

TEST_SUITE("vmm") {
  PVMM_CASE("mapping the first part of an allocation works exactly where the capability says so") {
    PVMM_REQUIRE_DEVICE();
    const std::size_t g = granule();
    auto memory = physical_allocation::create(2 * g, default_properties()).value();
    auto range = address_reservation::reserve(g).value();
    const bool partial = caps().vmm.map_part_of_allocation;  // asked before counting: it is a backend call
    const std::size_t calls = testing::backend_call_count();
    auto p = range.map(0, memory, 0, g);
    if (partial) {
      PVMM_REQUIRE_VALUE(p);
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
    auto memory = physical_allocation::create(2 * g, default_properties()).value();
    auto range = address_reservation::reserve(4 * g).value();
    void* p = range.map_and_grant(2 * g, memory, {rw()}).value();
    CHECK(p == range.at(2 * g));
    write_words(p, pattern(2 * g, 62));
    CHECK(read_words(p, 2 * g) == pattern(2 * g, 62));
    PVMM_CHECK_OK(range.unmap(2 * g, 2 * g));
    PVMM_CHECK_OK(range.map(0, memory));
    PVMM_CHECK_ERRC(range.map(g, memory), errc::overlapping_mapping);
  }

  PVMM_CASE("can_access_peer: a device reaches its own memory, every pair answers, bad ordinals are refused") {
    PVMM_REQUIRE_DEVICE();
    const int n = device_count().value();
    for (int d = 0; d < n; ++d) {
      CHECK(can_access_peer(d, d).value());
      for (int peer = 0; peer < n; ++peer) PVMM_CHECK_OK(can_access_peer(d, peer));
    }
    PVMM_CHECK_ERRC(can_access_peer(0, n), errc::invalid_device);
    PVMM_CHECK_ERRC(can_access_peer(-1, 0), errc::invalid_device);
  }

  PVMM_CASE("reservation_granularity is the largest minimum granularity of every device, and reserve's unit") {
    PVMM_REQUIRE_DEVICE();
    const std::size_t unit = reservation_granularity().value();
    std::size_t largest = 0;
    for (int d = 0; d < device_count().value(); ++d) largest = std::max(largest, granule(d));
    CHECK(unit == largest);
    PVMM_CHECK_OK(address_reservation::reserve(unit));
    PVMM_CHECK_ERRC(address_reservation::reserve(unit + unit / 2), errc::unaligned);
    // An arbitrary size rounded up with it is always accepted.
    const std::size_t arbitrary = 3 * unit + 12345;
    PVMM_CHECK_OK(address_reservation::reserve((arbitrary + unit - 1) / unit * unit));
  }

  PVMM_CASE("reserve accepts every power-of-two alignment, as the drivers do, the range is aligned to the unit") {
    PVMM_REQUIRE_DEVICE();
    const std::size_t unit = reservation_granularity().value();
    for (std::size_t alignment = 1; alignment <= 4 * unit; alignment *= 2) {
      CAPTURE(alignment);
      auto r = address_reservation::reserve(unit, alignment);
      PVMM_REQUIRE_VALUE(r);
      const auto at = reinterpret_cast<std::uintptr_t>(r->address());
      CHECK(at % std::max(alignment, unit) == 0);
    }
    PVMM_CHECK_ERRC(address_reservation::reserve(unit, 3), errc::invalid_alignment);
    PVMM_CHECK_ERRC(address_reservation::reserve(unit, unit + 1), errc::invalid_alignment);
  }

  PVMM_CASE("properties() reads each location back as it was created, on every backend") {
    PVMM_REQUIRE_DEVICE();
    auto check_round_trip = [](location where) {
      CAPTURE(static_cast<int>(where.type));
      CAPTURE(where.id);
      allocation_properties p;
      p.location = where;
      const std::size_t g = query_granularity(p).value().minimum;
      auto memory = physical_allocation::create(g, p).value();
      CHECK(memory.properties().value().location == where);
      auto range = address_reservation::reserve(reservation_granularity().value()).value();
      void* at = range.map(0, memory).value();
      CHECK(physical_allocation::retain(at).value().properties().value().location == where);
      PVMM_CHECK_OK(range.unmap(0, g));
    };
    for (int d = 0; d < device_count().value(); ++d) check_round_trip(location::device(d));
    const auto c = caps();
    if (c.vmm.host_location)
      check_round_trip(location::host());
    else
      MESSAGE("no host-located memory here: host() not checked");
    if (c.vmm.host_numa_location)
      check_round_trip(location::host_numa(c.vmm.host_numa_id < 0 ? 0 : c.vmm.host_numa_id));
    else
      MESSAGE("no NUMA-located memory here: host_numa(n) not checked");
  }

  PVMM_CASE("the host can be granted host-located memory: written by the host, read by the device and back") {
    PVMM_REQUIRE_DEVICE();
    PVMM_REQUIRE_CAPABILITY(caps().vmm.host_location, "host-located memory");
    allocation_properties p;
    p.location = location::host();
    const std::size_t g = query_granularity(p).value().minimum;
    auto memory = physical_allocation::create(g, p).value();
    auto range = address_reservation::reserve((g + reservation_granularity().value() - 1) /
                                              reservation_granularity().value() * reservation_granularity().value())
                     .value();
    const access_descriptor host_rw{location::host(), access::read_write};
    auto* at = static_cast<std::uint32_t*>(range.map_and_grant(0, memory, {rw(), host_rw}).value());
    CHECK(query_access(location::host(), at).value() == access::read_write);
    const auto from_host = pattern(g, 63);
    std::memcpy(at, from_host.data(), g);   // the host's own store, through the mapping
    CHECK(read_words(at, g) == from_host);  // read by the device
    const auto from_device = pattern(g, 64);
    write_words(at, from_device);
    CHECK(std::memcmp(at, from_device.data(), g) == 0);  // the host's own load
    PVMM_CHECK_OK(range.unmap(0, g));
  }

  PVMM_CASE("a host grant to device memory works exactly where the capability says so") {
    PVMM_REQUIRE_DEVICE();
    const std::size_t g = granule();
    auto memory = physical_allocation::create(g, default_properties()).value();
    auto range = address_reservation::reserve(reservation_granularity().value()).value();
    auto* at = static_cast<std::uint32_t*>(range.map(0, memory).value());
    const bool allowed = caps().vmm.host_access_to_device_memory;  // asked before counting: it is a backend call
    const std::size_t calls = testing::backend_call_count();
    auto granted = range.set_access(0, g, {rw(), {location::host(), access::read_write}});
    if (allowed) {
      PVMM_REQUIRE_VALUE(granted);
      const auto words = pattern(g, 65);
      std::memcpy(at, words.data(), g);
      CHECK(read_words(at, g) == words);
    } else {
      PVMM_CHECK_ERRC(granted, errc::not_supported);
      CHECK_MESSAGE(testing::backend_call_count() == calls, "the refusal reached the driver");
      CHECK(query_access(location::device(0), at).value() == access::none);  // nothing was granted
      // A none grant to the host asks for nothing and is not refused.
      PVMM_CHECK_OK(range.set_access(0, g, {rw(), {location::host(), access::none}}));
    }
    PVMM_CHECK_OK(range.unmap(0, g));
  }
}  // TEST_SUITE
