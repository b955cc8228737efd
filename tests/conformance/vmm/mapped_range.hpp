// A reservation with two mappings, shared by the bad-input cases about mappings and access: each mistake must leave
// the state before it intact.
#pragma once

#include "support.hpp"

namespace pvmm_test {

/// A reservation of 4 granules: [0,g) and [g,2g) mapped with read-write, [2g,4g) unmapped.
struct mapped_range {
  std::size_t g = granule();
  pvmm::physical_allocation a = pvmm::physical_allocation::create(g, default_properties()).value();
  pvmm::physical_allocation b = pvmm::physical_allocation::create(g, default_properties()).value();
  pvmm::address_reservation range = pvmm::address_reservation::reserve(4 * g).value();
  mapped_range() {
    range.map_and_grant(0, a, 0, g, {rw()}).value();
    range.map_and_grant(g, b, 0, g, {rw()}).value();
    write_words(range.address(), pattern(2 * g, 99));
  }
  /// Maps a fresh allocation of 2 granules at [2g,4g), with no access granted, and returns it: a mapping a mistake
  /// can aim at part of.
  pvmm::physical_allocation map_wide() {
    auto wide = pvmm::physical_allocation::create(2 * g, default_properties()).value();
    range.map(2 * g, wide, 0, 2 * g).value();
    return wide;
  }
  /// Nothing lost: both mappings still hold their data and are still writable.
  void still_intact() {
    CHECK(range.mapping_count() == 2);
    CHECK(read_words(range.address(), 2 * g) == pattern(2 * g, 99));
  }
};

}  // namespace pvmm_test
