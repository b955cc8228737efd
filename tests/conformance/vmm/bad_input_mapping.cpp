// Bad input to reserve, map, unmap, release and retain: each case asserts the exact portable error, that nothing
// was lost (the mappings before the mistake still hold their data) and that nothing leaked.
#include "mapped_range.hpp"
#include "support.hpp"

using namespace pvmm;
using namespace pvmm_test;

TEST_SUITE("bad input") {
  // ---- address_reservation::reserve ----
  PVMM_CASE("reserve: zero size") {
    PVMM_REQUIRE_DEVICE();
    PVMM_CHECK_ERRC(address_reservation::reserve(0), errc::invalid_size);
  }
  PVMM_CASE("reserve: size not a multiple of the granularity") {
    PVMM_REQUIRE_DEVICE();
    PVMM_CHECK_ERRC(address_reservation::reserve(granule() + 1), errc::unaligned);
  }
  PVMM_CASE("reserve: alignment not a power of two") {
    PVMM_REQUIRE_DEVICE();
    PVMM_CHECK_ERRC(address_reservation::reserve(granule(), 3 * granule()), errc::invalid_alignment);
  }
  PVMM_CASE("reserve: fixed address not aligned") {
    PVMM_REQUIRE_DEVICE();
    PVMM_CHECK_ERRC(address_reservation::reserve(granule(), 0, reinterpret_cast<void*>(0x10001)), errc::unaligned);
  }
  PVMM_CASE("reserve: fixed address already taken is reported, not used") {
    PVMM_REQUIRE_DEVICE();
    auto taken = address_reservation::reserve(granule()).value();
    PVMM_CHECK_ERRC(address_reservation::reserve(granule(), 0, taken.address()), errc::address_unavailable);
  }

  // ---- map ----
  PVMM_CASE("map: zero size") {
    PVMM_REQUIRE_DEVICE();
    mapped_range m;
    PVMM_CHECK_ERRC(m.range.map(2 * m.g, m.a, 0, 0), errc::invalid_size);
    m.still_intact();
  }
  PVMM_CASE("map: size not a multiple of the granularity") {
    PVMM_REQUIRE_DEVICE();
    mapped_range m;
    PVMM_CHECK_ERRC(m.range.map(2 * m.g, m.a, 0, m.g / 2), errc::unaligned);
    m.still_intact();
  }
  PVMM_CASE("map: offset not a multiple of the granularity") {
    PVMM_REQUIRE_DEVICE();
    mapped_range m;
    PVMM_CHECK_ERRC(m.range.map(2 * m.g + 4096 / 2, m.a, 0, m.g), errc::unaligned);
    m.still_intact();
  }
  PVMM_CASE("map: offset beyond the reservation") {
    PVMM_REQUIRE_DEVICE();
    mapped_range m;
    PVMM_CHECK_ERRC(m.range.map(8 * m.g, m.a, 0, m.g), errc::out_of_range);
    m.still_intact();
  }
  PVMM_CASE("map: range running past the end of the reservation") {
    PVMM_REQUIRE_DEVICE();
    mapped_range m;
    auto big = physical_allocation::create(2 * m.g, default_properties()).value();
    PVMM_CHECK_ERRC(m.range.map(3 * m.g, big, 0, 2 * m.g), errc::out_of_range);
    m.still_intact();
  }
  PVMM_CASE("map: range running past the end of the allocation") {
    PVMM_REQUIRE_DEVICE();
    mapped_range m;
    PVMM_CHECK_ERRC(m.range.map(2 * m.g, m.a, 0, 2 * m.g), errc::out_of_range);
    m.still_intact();
  }
  PVMM_CASE("map: onto an existing mapping") {
    PVMM_REQUIRE_DEVICE();
    mapped_range m;
    PVMM_CHECK_ERRC(m.range.map(m.g, m.a, 0, m.g), errc::overlapping_mapping);
    m.still_intact();
  }
  PVMM_CASE("map: overlapping the tail of an existing mapping") {
    PVMM_REQUIRE_DEVICE();
    mapped_range m;
    auto big = physical_allocation::create(2 * m.g, default_properties()).value();
    PVMM_CHECK_ERRC(m.range.map(m.g, big, 0, 2 * m.g), errc::overlapping_mapping);
    m.still_intact();
  }
  PVMM_CASE("map: a released allocation") {
    PVMM_REQUIRE_DEVICE();
    mapped_range m;
    physical_allocation gone = physical_allocation::create(m.g, default_properties()).value();
    PVMM_CHECK_OK(gone.release());
    PVMM_CHECK_ERRC(m.range.map(2 * m.g, gone, 0, m.g), errc::already_released);
    m.still_intact();
  }
  PVMM_CASE("map: into a released reservation") {
    PVMM_REQUIRE_DEVICE();
    mapped_range m;
    auto empty = address_reservation::reserve(m.g).value();
    PVMM_CHECK_OK(empty.release());
    PVMM_CHECK_ERRC(empty.map(0, m.a, 0, m.g), errc::already_released);
    m.still_intact();
  }

  // ---- unmap ----
  PVMM_CASE("unmap: a range that is not mapped, or not a range, is refused and changes nothing") {
    PVMM_REQUIRE_DEVICE();
    struct mistake {
      const char* name;
      std::size_t offset, size;  // in granules
      errc expected;
    };
    const mistake mistakes[] = {
        {"a range that is not mapped", 2, 1, errc::not_mapped},
        {"a range with a hole in it", 0, 3, errc::not_mapped},
        {"outside the reservation", 4, 1, errc::out_of_range},
        {"zero size", 0, 0, errc::invalid_size},
    };
    for (const mistake& x : mistakes) {
      SUBCASE(x.name) {
        mapped_range m;
        PVMM_CHECK_ERRC(m.range.unmap(x.offset * m.g, x.size * m.g), x.expected);
        m.still_intact();
      }
    }
  }
  PVMM_CASE("unmap: part of a mapping is partial_mapping, and the mapping stays whole") {
    PVMM_REQUIRE_DEVICE();
    struct part {
      const char* name;
      std::size_t offset;  // in granules; the mapping is [2,4)
    };
    const part parts[] = {{"its first half", 2}, {"starting inside it", 3}};
    for (const part& p : parts) {
      SUBCASE(p.name) {
        mapped_range m;
        auto wide = m.map_wide();
        PVMM_CHECK_ERRC(m.range.unmap(p.offset * m.g, m.g), errc::partial_mapping);
        CHECK(m.range.mapping_count() == 3);
        m.range.unmap(2 * m.g, 2 * m.g).value();
        m.still_intact();
      }
    }
  }

  // ---- release ----
  PVMM_CASE("release: a reservation that still has mappings is refused and keeps them") {
    PVMM_REQUIRE_DEVICE();
    mapped_range m;
    PVMM_CHECK_ERRC(m.range.release(), errc::busy);
    CHECK(m.range.valid());
    m.still_intact();
  }
  PVMM_CASE("release: an allocation twice") {
    PVMM_REQUIRE_DEVICE();
    auto memory = physical_allocation::create(granule(), default_properties()).value();
    check_release_twice(memory);
  }
  PVMM_CASE("release: a reservation twice") {
    PVMM_REQUIRE_DEVICE();
    auto range = address_reservation::reserve(granule()).value();
    check_release_twice(range);
  }
  PVMM_CASE("release: a moved-from allocation") {
    PVMM_REQUIRE_DEVICE();
    auto memory = physical_allocation::create(granule(), default_properties()).value();
    auto owner = std::move(memory);
    PVMM_CHECK_ERRC(memory.release(), errc::already_released);
    CHECK(owner.valid());
  }
  PVMM_CASE("retain: an address that is not mapped") {
    PVMM_REQUIRE_DEVICE();
    mapped_range m;
    PVMM_CHECK_ERRC(physical_allocation::retain(m.range.at(2 * m.g)), errc::not_mapped);
  }
  PVMM_CASE("retain: a null address") {
    PVMM_REQUIRE_DEVICE();
    PVMM_CHECK_ERRC(physical_allocation::retain(nullptr), errc::not_mapped);
  }
}  // TEST_SUITE
