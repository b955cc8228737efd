// Bad input to set_access and query_access: each case asserts the exact portable error, that nothing was lost (the
// mappings before the mistake still hold their data) and that nothing leaked.
#include "mapped_range.hpp"
#include "support.hpp"

using namespace pvmm;
using namespace pvmm_test;

TEST_SUITE("bad input") {
  // ---- access ----
  PVMM_CASE("set_access: on an unmapped range") {
    PVMM_REQUIRE_DEVICE();
    mapped_range m;
    PVMM_CHECK_ERRC(m.range.set_access(2 * m.g, m.g, {rw()}), errc::not_mapped);
    m.still_intact();
  }
  PVMM_CASE("set_access: over part of a mapping") {
    PVMM_REQUIRE_DEVICE();
    mapped_range m;
    auto wide = m.map_wide();
    PVMM_CHECK_ERRC(m.range.set_access(2 * m.g, m.g, {rw()}), errc::partial_mapping);
    CHECK(query_access(location::device(0), m.range.at(2 * m.g)).value() == access::none);  // nothing granted
    m.range.unmap(2 * m.g, 2 * m.g).value();
    m.still_intact();
  }
  PVMM_CASE("set_access: no grants") {
    PVMM_REQUIRE_DEVICE();
    mapped_range m;
    PVMM_CHECK_ERRC(m.range.set_access(0, m.g, nullptr, 0), errc::invalid_argument);
    m.still_intact();
  }
  PVMM_CASE("set_access: unknown device") {
    PVMM_REQUIRE_DEVICE();
    mapped_range m;
    PVMM_CHECK_ERRC(m.range.set_access(0, m.g, {{location::device(1000), access::read}}), errc::invalid_device);
    m.still_intact();
  }
  PVMM_CASE("set_access: the same location twice") {
    PVMM_REQUIRE_DEVICE();
    mapped_range m;
    PVMM_CHECK_ERRC(m.range.set_access(0, m.g, {rw(), ro()}), errc::invalid_argument);
    m.still_intact();
  }
  PVMM_CASE("set_access: an access value out of range") {
    PVMM_REQUIRE_DEVICE();
    mapped_range m;
    PVMM_CHECK_ERRC(m.range.set_access(0, m.g, {{location::device(0), static_cast<pvmm::access>(9)}}),
                    errc::invalid_argument);
    m.still_intact();
  }
  PVMM_CASE("set_access: range outside the reservation") {
    PVMM_REQUIRE_DEVICE();
    mapped_range m;
    PVMM_CHECK_ERRC(m.range.set_access(3 * m.g, 2 * m.g, {rw()}), errc::out_of_range);
    m.still_intact();
  }
  PVMM_CASE("query_access: an address that is reserved but not mapped") {
    PVMM_REQUIRE_DEVICE();
    mapped_range m;
    PVMM_CHECK_ERRC(query_access(location::device(0), m.range.at(3 * m.g)), errc::not_mapped);
  }
  PVMM_CASE("query_access: unknown device") {
    PVMM_REQUIRE_DEVICE();
    mapped_range m;
    PVMM_CHECK_ERRC(query_access(location::device(1000), m.range.address()), errc::invalid_device);
  }
}  // TEST_SUITE
