// address_reservation's mappings: map (a claim slot, or a busy mark, on the new record while the backend maps) and
// unmap (busy marks, mapping by mapping). The marks: claim_marks.hpp and docs/design.md, "Claim marks".
//
// Hot layout: map_state, address_reservation::map and ::unmap are listed by mangled name in cmake/hot_layout.ld; a
// rename or a new signature drops one out of it (ctest -R hot_layout says so).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include <fmt/format.h>

#include <pvmm/reservation.hpp>

#include "backend/vmm.hpp"
#include "core/checked_math.hpp"
#include "core/device.hpp"
#include "observe/observe.hpp"
#include "vmm/reservation_checks.hpp"

namespace pvmm {
namespace detail {
namespace {

result<void*> map_state(reservation_state* r, std::size_t offset, const std::shared_ptr<allocation_state>& memory,
                        std::size_t memory_offset, std::size_t size) {
  auto args = [&] { return fmt::format("offset={:#x}, memory_offset={:#x}, size={:#x}", offset, memory_offset, size); };
  const operation op{"pvmm::address_reservation::map", args};
  if (!r) return released_reservation(op);
  if (!memory) return op.fail(errc::already_released, "the memory to map is empty (released or moved from)");
  const std::size_t unit = memory->granularity;
  if (size == 0) return op.fail(errc::invalid_size, "size is zero");
  if (!is_multiple(size, unit) || !is_multiple(offset, unit) || !is_multiple(memory_offset, unit))
    return op.fail(errc::unaligned,
                   fmt::format("offset, memory_offset and size must be multiples of the granularity {:#x}", unit));
  if (!range_within(offset, size, r->size))
    return op.fail(errc::out_of_range, fmt::format("[{:#x}, {:#x}) is outside the reservation of size {:#x}", offset,
                                                   offset + size, r->size));
  if (!range_within(memory_offset, size, memory->size))
    return op.fail(errc::out_of_range, fmt::format("[{:#x}, {:#x}) is outside the memory of size {:#x}", memory_offset,
                                                   memory_offset + size, memory->size));
  if ((memory_offset != 0 || size != memory->size) && memory->what == allocation_state::kind::memory) {
    auto caps = device_capabilities(device_of(memory->properties.location));
    if (!caps) return op.wrap(std::move(caps).error());
    if (memory_offset == 0 && !caps->vmm.map_part_of_allocation)
      return op.fail(errc::not_supported,
                     fmt::format("the {} backend maps whole allocations only: {:#x} of {:#x} bytes asked",
                                 backend::traits.name, size, memory->size),
                     "map the whole allocation, or allocate chunks of the size you map");
    if (memory_offset != 0 && !caps->vmm.map_at_physical_offset)
      return op.fail(
          errc::not_supported,
          fmt::format("the {} backend cannot map from a nonzero offset into physical memory", backend::traits.name),
          "map whole allocations (memory_offset 0), or split the allocation into chunks");
  }
  std::size_t slot = 0;   // where the claimed record was entered
  std::size_t claim = 0;  // its claim slot (1-based); 0: its busy mark, cleared under the lock
  {
    // Check and claim the range in one critical section; the claim is withdrawn if the backend fails.
    std::lock_guard<spin_lock> guard(r->lock);
    auto next = r->mappings.lower_bound(offset);
    auto overlap = [&](mapping_table::iterator it) {
      return op.fail(errc::overlapping_mapping,
                     fmt::format("[{:#x}, {:#x}) overlaps the mapping at [{:#x}, {:#x})", offset, offset + size,
                                 it->first, it->first + it->second.size),
                     "unmap it first");
    };
    if (next != r->mappings.end() && next->first < offset + size) return overlap(next);
    if (next != r->mappings.begin() && std::prev(next)->first + std::prev(next)->second.size > offset)
      return overlap(std::prev(next));
    slot = r->mappings.index_of(next);
    claim = claim_for_map(*r, next, offset, slot, mapping_record{size, memory, memory_offset});
  }
  void* address = static_cast<char*>(r->address) + offset;
  auto ok = call_backend("map", [&] { return memory->map_at(address, size, memory_offset); });
  if (ok)
    observe::record_on(observe::action::segment_map, address, size,
                       [&] { return device_of(memory->properties.location); });
  if (ok && claim != 0) {  // made: giving the slot back says so (reservation_state::made), no lock
    give_back_claim_slot(*r, claim);
    return address;
  }
  std::lock_guard<spin_lock> guard(r->lock);
  auto it = r->mappings.find(offset, slot);  // still there: the claim kept every other thread off it
  if (!ok) {
    r->mappings.erase(it);
    if (claim != 0) give_back_claim_slot(*r, claim);  // its record is gone
    return op.wrap(std::move(ok).error());
  }
  mark_made(it->second);
  return address;
}

}  // namespace
}  // namespace detail

using detail::call_backend;
using detail::owner_access;

result<void*> address_reservation::map(std::size_t offset, const physical_allocation& memory, std::size_t memory_offset,
                                       std::size_t size) {
  return detail::map_state(state_.get(), offset, owner_access::of(memory), memory_offset, size);
}

result<void*> address_reservation::map(std::size_t offset, const multicast_object& object, std::size_t object_offset,
                                       std::size_t size) {
  return detail::map_state(state_.get(), offset, owner_access::of(object), object_offset, size);
}

result<void*> address_reservation::map_and_grant(std::size_t offset, const physical_allocation& memory,
                                                 std::size_t memory_offset, std::size_t size, access_list grants) {
  auto address = map(offset, memory, memory_offset, size);
  if (!address) return address;
  if (auto ok = set_access(offset, size, grants); !ok) {
    (void)unmap(offset, size);
    return std::move(ok).error();
  }
  return address;
}

status address_reservation::unmap(std::size_t offset, std::size_t size) {
  auto args = [&] { return fmt::format("offset={:#x}, size={:#x}", offset, size); };
  const detail::operation op{"pvmm::address_reservation::unmap", args};
  if (!state_) return detail::released_reservation(op);
  // The claimed mappings are the adjacent ones from `offset` to `end` (whole_mappings): each next one is found
  // where the last ended, so no list of them is kept.
  const std::size_t end = offset + size;
  std::size_t piece = 0;
  std::size_t slot = 0;  // where the next claimed mapping is in the table, unless another thread moved it
  {
    std::lock_guard<detail::spin_lock> guard(state_->lock);
    detail::mapping_span range;
    PVMM_TRY(detail::whole_mappings(*state_, offset, size, op, range));
    PVMM_TRY(detail::claim(*state_, range.first, range.last, op));
    piece = range.first->second.size;
    slot = state_->mappings.index_of(range.first);
  }
  // Unmap mapping by mapping (HIP needs whole mappings); each one is forgotten as soon as it is gone, so a
  // failure part-way leaves the table true to what is still mapped.
  for (std::size_t at = offset; at != end;) {
    auto ok =
        call_backend("unmap", [&] { return detail::backend::unmap(static_cast<char*>(state_->address) + at, piece); });
    std::shared_ptr<detail::allocation_state> memory;  // released outside the lock
    std::lock_guard<detail::spin_lock> guard(state_->lock);
    if (!ok) {
      detail::release_claimed_range(*state_, at, end - at, slot);  // the mappings not unmapped yet
      return op.wrap(std::move(ok).error());
    }
    detail::observe::record(detail::observe::action::segment_unmap, static_cast<char*>(state_->address) + at, piece);
    auto it = state_->mappings.find(at, slot);  // present: the claim kept other threads' unmaps off it
    memory = std::move(it->second.memory);
    it = state_->mappings.erase(it);
    at += piece;
    if (at != end) piece = it->second.size;  // the next claimed mapping starts where this one ended
  }
  return {};
}

}  // namespace pvmm
