// The marks a call puts on the mapping records it works on outside the reservation's lock: busy, made and claim
// slot (mapping_record, claim_slots in core/ownership.hpp). Which combinations exist, and what map, unmap,
// set_access and the counting paths do with each, is the state table in docs/design.md ("Claim marks");
// tests/conformance/vmm/claim_marks.cpp has a case per row. Every function here is called with the lock held,
// except give_back_claim_slot.
//
// Hot layout: map, unmap and set_access inline these; cmake/hot_layout.ld lists their callers by mangled name.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "core/ownership.hpp"

namespace pvmm::detail {

using mapping_table = flat_map<std::size_t, mapping_record>;

/// Whether another thread holds `m`: a map, unmap or grant that set its busy mark, or a map or grant whose slot
/// `m` is marked with is still active (acquire: its driver call happened before it gave the slot back).
inline bool busy(const reservation_state& r, const mapping_record& m) {
  return m.busy || (m.claim_slot != 0 && r.claims.active[m.claim_slot - 1].load(std::memory_order_acquire));
}

/// The first mapping of [first, last) another thread holds, or `last`.
inline mapping_table::iterator first_busy(const reservation_state& r, mapping_table::iterator first,
                                          mapping_table::iterator last) {
  for (auto it = first; it != last; ++it)
    if (busy(r, it->second)) return it;
  return last;
}

/// Marks the mappings [first, last), none of them busy, busy for one unmap (or a grant without a free slot).
inline void mark_busy(mapping_table::iterator first, mapping_table::iterator last) {
  for (auto it = first; it != last; ++it) it->second.busy = true;
}

/// Takes a free claim slot for [offset, offset + size), whose first mapping is at table index `index`, and clears
/// the marks the slot's last claim left; returns it (1-based), or 0 when all are taken.
[[gnu::always_inline]] inline std::size_t take_claim_slot(reservation_state& r, std::size_t offset, std::size_t size,
                                                          std::size_t index) {
  for (std::size_t k = 0; k < claim_slots::slots; ++k) {
    // acquire: the slot's last holder gave it back after its driver call, which must happen before what this
    // claim and those it marks made do next.
    if (r.claims.active[k].load(std::memory_order_acquire)) continue;
    const auto mark = static_cast<std::uint8_t>(k + 1);
    claim_slots::claimed_range& previous = r.claims.last[k];
    // Those of its mappings still there (the table only moves under the lock, and no other claim marks with k),
    // made: its map, if it was one, succeeded (a failed one erased its record). None to clear where it claims the
    // same range again (the same mappings: whole_mappings found them adjacent; a map's range was empty).
    if (previous.offset != offset || previous.end != offset + size)
      for (auto it = r.mappings.lower_bound(previous.offset, previous.index);
           it != r.mappings.end() && it->first < previous.end; ++it)
        if (it->second.claim_slot == mark) it->second.claim_slot = 0, it->second.made = true;
    previous = {offset, offset + size, index};
    r.claims.active[k].store(true, std::memory_order_relaxed);  // read under the lock only, until given back
    return mark;
  }
  return 0;
}

/// A map's claim of [offset, offset + record.size), where no mapping is: enters `record` at `next`
/// (lower_bound(offset), table index `index`) marked with a claim slot, or busy where every slot is taken; returns the
/// slot (1-based) or 0. Its map ends with give_back_claim_slot (made) or mark_made, or with erasing the record
/// (failed).
inline std::size_t claim_for_map(reservation_state& r, mapping_table::iterator next, std::size_t offset,
                                 std::size_t index, mapping_record record) {
  const std::size_t slot = take_claim_slot(r, offset, record.size, index);  // moves no record: `next` stays
  record.busy = slot == 0;
  record.claim_slot = static_cast<std::uint8_t>(slot);
  r.mappings.emplace_hint(next, offset, std::move(record));
  return slot;
}

/// The end of a map that held `m` with its busy mark: made, and free for other threads.
inline void mark_made(mapping_record& m) {
  m.busy = false;
  m.made = true;
}

/// Gives claim slot `slot` (1-based) back, without the lock: release, so that what its holder's driver call did
/// happens before whatever next finds the slot free (busy, take_claim_slot) or its map made (reservation_state::made).
inline void give_back_claim_slot(reservation_state& r, std::size_t slot) {
  r.claims.active[slot - 1].store(false, std::memory_order_release);
}

/// A set_access claim of [offset, offset + size), whose mappings are [first, last) at table index `index` (none of
/// them busy): marks them with a claim slot and returns it (1-based), or 0 with their busy marks set where every
/// slot is taken.
inline std::size_t claim_for_grant(reservation_state& r, std::size_t offset, std::size_t size,
                                   mapping_table::iterator first, mapping_table::iterator last, std::size_t index) {
  const std::size_t slot = take_claim_slot(r, offset, size, index);
  for (auto it = first; it != last; ++it) {
    // Not busy, so made (a map in flight is busy): said outright before the mark replaces the one that said so.
    mapping_record& m = it->second;
    if (!m.made) m.made = true;
    if (slot == 0)
      m.busy = true;
    else if (m.claim_slot != slot)  // a grant of the range claimed last by this slot writes nothing
      m.claim_slot = static_cast<std::uint8_t>(slot);
  }
  return slot;
}

/// Clears the busy marks of the mappings a claim of [offset, offset + size) holds, all still recorded (the claim
/// kept other threads from unmapping them, and no other mapping can start inside the range).
/// `hint`: where the first of them was when claimed.
inline void release_claimed_range(reservation_state& r, std::size_t offset, std::size_t size, std::size_t hint) {
  const std::size_t end = offset + size;
  for (auto it = r.mappings.find(offset, hint); it != r.mappings.end() && it->first < end; ++it)
    it->second.busy = false;
}

}  // namespace pvmm::detail
