// address_reservation: the range and its mappings (whole-mapping semantics) and access control.
#include <algorithm>
#include <cstddef>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include <pvmm/reservation.hpp>

#include "backend/vmm.hpp"
#include "core/address_registry.hpp"
#include "core/checked_math.hpp"
#include "core/describe.hpp"
#include "core/device.hpp"
#include "core/ownership.hpp"
#include "core/short_list.hpp"
#include "observe/observe.hpp"

namespace pvmm {
namespace detail {
namespace {

using mapping_table = flat_map<std::size_t, mapping_record>;
struct span {
  std::size_t offset;
  std::size_t size;
};
using span_list = short_list<span, 4>;  // a call usually touches one mapping

[[gnu::cold]] error released_reservation(const operation& op) {
  return op.fail(errc::already_released, "this address_reservation is empty (released or moved from)");
}

/// The mappings a range covers: [first, last).
struct mapping_span {
  mapping_table::iterator first, last;
};

/// Checks that [offset, offset+size) is within the reservation and covered exactly by whole, adjacent
/// mappings, and sets `out` to them. Caller holds r.lock. (A status and an out-parameter rather than a result of
/// the pair: on every unmap and set_access, the variant cost more than the check.)
status whole_mappings_scan(reservation_state& r, std::size_t offset, std::size_t size, const operation& op,
                           mapping_span& out) {
  if (size == 0) return op.fail(errc::invalid_size, "size is zero");
  if (!range_within(offset, size, r.size))
    return op.fail(errc::out_of_range, fmt::format("[{:#x}, {:#x}) is outside the reservation of size {:#x}", offset,
                                                   offset + size, r.size));
  auto first = r.mappings.upper_bound(offset);
  if (first != r.mappings.begin()) {
    auto prev = std::prev(first);
    if (offset < prev->first + prev->second.size) {
      if (prev->first != offset)
        return op.fail(errc::partial_mapping,
                       fmt::format("offset {:#x} falls inside the mapping [{:#x}, {:#x})", offset, prev->first,
                                   prev->first + prev->second.size),
                       "pvmm works on whole mappings: start at a mapping's first byte");
      first = prev;
    }
  }
  std::size_t cursor = offset;
  auto it = first;
  const std::size_t end = offset + size;
  while (cursor < end) {
    if (it == r.mappings.end() || it->first != cursor)
      return op.fail(errc::not_mapped, fmt::format("[{:#x}, {:#x}) is not mapped", cursor,
                                                   it == r.mappings.end() ? end : std::min(end, it->first)));
    cursor = it->first + it->second.size;
    ++it;
  }
  if (cursor != end)
    return op.fail(errc::partial_mapping,
                   fmt::format("the range ends at {:#x} inside the mapping that ends at {:#x}", end, cursor),
                   "pvmm works on whole mappings: end at a mapping's last byte");
  out = {first, it};
  return {};
}

/// As whole_mappings_scan, with the common case inline: the range is one whole mapping.
inline status whole_mappings(reservation_state& r, std::size_t offset, std::size_t size, const operation& op,
                             mapping_span& out) {
  if (auto it = r.mappings.find(offset); it != r.mappings.end() && it->second.size == size) {
    out = {it, std::next(it)};
    return {};
  }
  return whole_mappings_scan(r, offset, size, op, out);
}

/// Host grants (to host() or host_numa(n)) are a capability: memory on the host can be granted to the host
/// where host memory exists at all; device memory only where the device says so; a multicast object never.
status check_host_access(const short_list<const allocation_state*, 4>& memories, const operation& op) {
  for (const allocation_state* m : memories) {
    if (m->what == allocation_state::kind::multicast)
      return op.fail(errc::not_supported, "the host cannot be granted access to a multicast object's mapping");
    const location where = m->properties.location;
    if (where.type != location::kind::device) continue;
    PVMM_TRY_ASSIGN(c, device_capabilities(where.id));
    if (!c.vmm.host_access_to_device_memory)
      return op.fail(errc::not_supported,
                     fmt::format("the host cannot be granted access to memory on device {}", where.id),
                     "create the memory at location::host() or host_numa(n) for the host to access it "
                     "(capabilities.vmm.host_access_to_device_memory)");
  }
  return {};
}

/// Marks the mappings in [first, last) busy for one operation outside the lock, or says which one another
/// thread holds. Caller holds the reservation's lock.
[[gnu::cold]] error busy_mapping(mapping_table::iterator it, const operation& op) {
  return op.fail(
      errc::busy,
      fmt::format("another thread is changing the mapping at [{:#x}, {:#x})", it->first, it->first + it->second.size),
      "an address_reservation may be used from several threads on different mappings only");
}
/// Whether another thread holds `m`: a map, unmap or grant that set its busy mark, or a map or grant whose slot
/// `m` is marked with is still active (acquire: its driver call happened before it gave the slot back).
inline bool busy(const reservation_state& r, const mapping_record& m) {
  return m.busy || (m.claim_slot != 0 && r.claims.active[m.claim_slot - 1].load(std::memory_order_acquire));
}
inline status check_claimable(const reservation_state& r, mapping_table::iterator first, mapping_table::iterator last,
                              const operation& op) {
  for (auto it = first; it != last; ++it)
    if (busy(r, it->second)) return busy_mapping(it, op);
  return {};
}
inline status claim(const reservation_state& r, mapping_table::iterator first, mapping_table::iterator last,
                    const operation& op) {
  PVMM_TRY(check_claimable(r, first, last, op));
  for (auto it = first; it != last; ++it) it->second.busy = true;
  return {};
}

/// Takes a free claim slot for [offset, offset + size), whose first mapping is at table index `index`, and clears
/// the marks the slot's last claim left (caller holds the lock); returns it (1-based), or 0 when all are taken.
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

/// Gives claim slot `slot` (1-based) back, without the lock: release, so that what its holder's driver call did
/// happens before whatever next finds the slot free (busy, take_claim_slot) or its map made (reservation_state::made).
inline void give_back_claim_slot(reservation_state& r, std::size_t slot) {
  r.claims.active[slot - 1].store(false, std::memory_order_release);
}

/// A set_access claim of [offset, offset + size), whose mappings are [first, last) at table index `index` (caller
/// holds the lock and checked them claimable): marks them with a claim slot and returns it (1-based), or 0 with
/// their busy marks set where every slot is taken.
inline std::size_t claim_for_grant(reservation_state& r, std::size_t offset, std::size_t size,
                                   mapping_table::iterator first, mapping_table::iterator last, std::size_t index) {
  const std::size_t slot = take_claim_slot(r, offset, size, index);
  for (auto it = first; it != last; ++it) {
    // Claimable, so made (a map in flight is busy): said outright before the mark replaces the one that said so.
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
/// kept other threads from unmapping them, and no other mapping can start inside the range). Caller holds the lock.
/// `hint`: where the first of them was when claimed.
inline void release_claimed_range(reservation_state& r, std::size_t offset, std::size_t size, std::size_t hint) {
  const std::size_t end = offset + size;
  for (auto it = r.mappings.find(offset, hint); it != r.mappings.end() && it->first < end; ++it)
    it->second.busy = false;
}

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
    claim = take_claim_slot(*r, offset, size, slot);
    mapping_record record{size, memory, memory_offset, /*busy=*/claim == 0};
    record.claim_slot = static_cast<std::uint8_t>(claim);
    r->mappings.emplace_hint(next, offset, std::move(record));
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
  mapping_record& made = it->second;
  made.busy = false;
  made.made = true;
  return address;
}

}  // namespace
}  // namespace detail

using detail::call_backend;
using detail::owner_access;

address_reservation::address_reservation(state_owner state) noexcept : state_(std::move(state)) {}

void* address_reservation::address() const noexcept { return state_ ? state_->address : nullptr; }
std::size_t address_reservation::size() const noexcept { return state_ ? state_->size : 0; }
std::size_t address_reservation::mapping_count() const noexcept {
  if (!state_) return 0;
  std::lock_guard<detail::spin_lock> guard(state_->lock);
  return state_->mappings.size();
}

result<address_reservation> address_reservation::reserve(std::size_t size, std::size_t alignment,
                                                         const void* fixed_address) {
  auto args = [&] {
    return fmt::format("size={:#x}, alignment={:#x}, fixed_address={}", size, alignment, fixed_address);
  };
  const detail::operation op{"pvmm::address_reservation::reserve", args};
  auto unit = detail::reservation_unit();
  if (!unit) return op.wrap(std::move(unit).error());
  if (size == 0) return op.fail(errc::invalid_size, "size is zero");
  if (!detail::is_multiple(size, *unit)) {
    auto rounded = detail::checked_round_up(size, *unit);
    if (!rounded)
      return op.fail(
          errc::out_of_memory,
          fmt::format("size rounded up to the reservation granularity {:#x} exceeds the address space", *unit));
    return op.fail(errc::unaligned, fmt::format("size is not a multiple of the reservation granularity {:#x}", *unit),
                   fmt::format("round up to {:#x}", *rounded));
  }
  if (alignment != 0 && !detail::is_power_of_two(alignment))
    return op.fail(errc::invalid_alignment, fmt::format("alignment {:#x} is not 0 or a power of two", alignment));
  // Like cuMemAddressReserve and hipMemAddressReserve, any power of two is accepted; the range is always aligned
  // to at least the reservation granularity, so alignments up to it ask for nothing more than the default.
  const std::size_t backend_alignment = alignment > *unit ? alignment : 0;
  // A backend may over-reserve by the alignment to trim the range into place: that sum must exist.
  if (backend_alignment && !detail::checked_add(size, backend_alignment))
    return op.fail(errc::out_of_memory,
                   fmt::format("size {:#x} plus alignment {:#x} exceeds the address space", size, alignment));
  const std::size_t effective_alignment = std::max(alignment, *unit);
  if (fixed_address && !detail::is_multiple(reinterpret_cast<std::uintptr_t>(fixed_address), effective_alignment))
    return op.fail(errc::unaligned, fmt::format("fixed_address is not aligned to {:#x}", effective_alignment));
  auto address = op.step("reserve", [&] { return detail::backend::reserve(size, backend_alignment, fixed_address); });
  if (!address) return std::move(address).error();
  void* const at = *address;
  if (!detail::is_multiple(reinterpret_cast<std::uintptr_t>(at), effective_alignment)) {
    (void)detail::backend::free_reservation(at, size);  // rollback: never fault-injected
    return op.fail(errc::backend_error,
                   fmt::format("the backend returned {}, which is not aligned to {:#x}; it was given back", at,
                               effective_alignment));
  }
  if (fixed_address && at != fixed_address) {
    (void)detail::backend::free_reservation(at, size);  // rollback: never fault-injected
    return op.fail(errc::address_unavailable, fmt::format("the range landed at {} instead; it was given back", at),
                   "reserve without a fixed address and remap the physical memory there");
  }
  auto state = detail::new_reservation_state(at, size);
  if (!state || !detail::address_registry::add(state.get())) {
    if (state) state->freed = true;                     // not in the registry: the rollback below frees the range
    (void)detail::backend::free_reservation(at, size);  // rollback: never fault-injected
    return op.fail(errc::out_of_memory,
                   "no host memory for pvmm's record of the reservation; the range was given back");
  }
  detail::observe::record(detail::observe::action::segment_alloc, at, size);
  return address_reservation(std::move(state));
}

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

status address_reservation::set_access(std::size_t offset, std::size_t size, access_list list) {
  const access_descriptor* grants = list.data();
  const std::size_t count = list.size();
  auto args = [&] { return fmt::format("offset={:#x}, size={:#x}, grants={}", offset, size, count); };
  const detail::operation op{"pvmm::address_reservation::set_access", args};
  if (!state_) return detail::released_reservation(op);
  if (grants == nullptr || count == 0) return op.fail(errc::invalid_argument, "no access grants given");
  for (std::size_t i = 0; i < count; ++i) {
    const auto& g = grants[i];
    if (g.location.type != location::kind::device && g.location.type != location::kind::host &&
        g.location.type != location::kind::host_numa)
      return op.fail(errc::invalid_location, fmt::format("grant {} has an unknown location kind", i));
    PVMM_TRY(detail::check_location(g.location, op));
    if (g.access != access::none && g.access != access::read && g.access != access::read_write)
      return op.fail(errc::invalid_argument,
                     fmt::format("grant {} has an unknown access value {}", i, static_cast<int>(g.access)));
    for (std::size_t j = 0; j < i; ++j)
      if (grants[j].location == g.location)
        return op.fail(errc::invalid_argument,
                       fmt::format("grants {} and {} both name {}", j, i, detail::describe(g.location)));
  }
  const bool to_host = std::any_of(grants, grants + count, [](const access_descriptor& g) {
    return g.location.type != location::kind::device && g.access != access::none;
  });
  // The claim covers exactly the adjacent mappings that make up [offset, offset + size) (whole_mappings), and keeps
  // them in the table until it is released: the release finds them again from `offset`, with no list of them.
  detail::span_list pieces;  // one driver call per mapping where the backend needs it (HIP), else none: the range
  detail::short_list<const detail::allocation_state*, 4> memories;  // for the host-access check
  const bool one_call = detail::backend::traits.set_access_spans_mappings;
  std::size_t slot = 0;        // where the first claimed mapping is in the table, unless another thread moved it
  std::size_t grant_slot = 0;  // the claim's grant slot (1-based); 0: busy marks, released under the lock
  auto release_claim = [&] {
    if (grant_slot != 0) {  // one store: no other thread changes the mappings a claim slot holds
      detail::give_back_claim_slot(*state_, grant_slot);
      return;
    }
    std::lock_guard<detail::spin_lock> guard(state_->lock);
    detail::release_claimed_range(*state_, offset, size, slot);
  };
  {
    std::lock_guard<detail::spin_lock> guard(state_->lock);
    detail::mapping_span range;
    PVMM_TRY(detail::whole_mappings(*state_, offset, size, op, range));
    PVMM_TRY(detail::check_claimable(*state_, range.first, range.last, op));
    slot = state_->mappings.index_of(range.first);
    grant_slot = detail::claim_for_grant(*state_, offset, size, range.first, range.last, slot);
    if (!one_call || to_host)
      for (auto it = range.first; it != range.last; ++it) {
        if (!one_call) pieces.push_back({it->first, it->second.size});
        if (to_host) memories.push_back(it->second.memory.get());  // kept alive by the claimed mapping
      }
  }
  if (auto ok = memories.size() == 0 ? status{} : detail::check_host_access(memories, op); !ok) {
    release_claim();
    return std::move(ok).error();
  }
  auto grant = [&](std::size_t off, std::size_t sz) {
    return call_backend("set_access", [&] {
      return detail::backend::set_access(static_cast<char*>(state_->address) + off, sz, grants, count);
    });
  };
  status outcome;
  if (one_call) {
    outcome = grant(offset, size);
  } else {
    for (auto [off, sz] : pieces)
      if (outcome = grant(off, sz); !outcome) break;
  }
  release_claim();
  if (!outcome) return op.wrap(std::move(outcome).error());
  return {};
}

status address_reservation::release() noexcept {
  const detail::operation op{"pvmm::address_reservation::release"};
  if (!state_) return detail::released_reservation(op);
  // Unlocked: no other thread may map or unmap while this one releases (the threading contract), and
  // lookups only read the table.
  if (std::size_t mapped = state_->mappings.size(); mapped != 0)
    return op.fail(errc::busy, fmt::format("{} mapping(s) remain in the range", mapped), "unmap them first");
  detail::address_registry::remove(state_.get());
  state_->freed = true;
  auto ok =
      op.step("free_reservation", [&] { return detail::backend::free_reservation(state_->address, state_->size); });
  state_.reset();
  return ok;
}

result<access> query_access(location where, const void* address) {
  auto args = [&] { return fmt::format("location={}, address={}", detail::describe(where), address); };
  const detail::operation op{"pvmm::query_access", args};
  PVMM_TRY(detail::check_location(where, op));
  PVMM_TRY(detail::address_registry::find_mapped(address, op));
  return op.step("get_access", [&] { return detail::backend::get_access(where, address); });
}

}  // namespace pvmm
