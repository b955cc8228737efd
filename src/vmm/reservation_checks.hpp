// The checks every call on an address_reservation's mappings makes, under its lock (defined in reservation.cpp):
// the range is whole mappings, and no other thread holds them (claim_marks.hpp).
#pragma once

#include <cstddef>

#include <pvmm/error.hpp>

#include "core/operation.hpp"
#include "vmm/claim_marks.hpp"

namespace pvmm::detail {

[[gnu::cold, gnu::visibility("hidden")]] error released_reservation(const operation& op);

/// The mappings a range covers: [first, last).
struct mapping_span {
  mapping_table::iterator first, last;
};

/// Checks that [offset, offset+size) is within the reservation and covered exactly by whole, adjacent
/// mappings, and sets `out` to them. Caller holds r.lock. (A status and an out-parameter rather than a result of
/// the pair: on every unmap and set_access, the variant cost more than the check.)
[[gnu::visibility("hidden")]] status whole_mappings_scan(reservation_state& r, std::size_t offset, std::size_t size,
                                                         const operation& op, mapping_span& out);

/// As whole_mappings_scan, with the common case inline: the range is one whole mapping.
inline status whole_mappings(reservation_state& r, std::size_t offset, std::size_t size, const operation& op,
                             mapping_span& out) {
  if (auto it = r.mappings.find(offset); it != r.mappings.end() && it->second.size == size) {
    out = {it, std::next(it)};
    return {};
  }
  return whole_mappings_scan(r, offset, size, op, out);
}

/// errc::busy naming the mapping `it` another thread holds.
[[gnu::cold, gnu::visibility("hidden")]] error busy_mapping(mapping_table::iterator it, const operation& op);

/// Says which mapping of [first, last) another thread holds, if one does. Caller holds the reservation's lock.
inline status check_claimable(const reservation_state& r, mapping_table::iterator first, mapping_table::iterator last,
                              const operation& op) {
  if (auto it = first_busy(r, first, last); it != last) return busy_mapping(it, op);
  return {};
}

/// Marks the mappings in [first, last) busy for one operation outside the lock, or says which one another
/// thread holds. Caller holds the reservation's lock.
inline status claim(const reservation_state& r, mapping_table::iterator first, mapping_table::iterator last,
                    const operation& op) {
  PVMM_TRY(check_claimable(r, first, last, op));
  mark_busy(first, last);
  return {};
}

}  // namespace pvmm::detail
