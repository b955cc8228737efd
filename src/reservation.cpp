// address_reservation: the range, its mappings (whole-mapping semantics), access control, and the
// process-wide registry that answers "which allocation is mapped at this address".
#include <algorithm>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include <pvmm/reservation.hpp>

#include "state.hpp"

namespace pvmm {
namespace detail {

namespace {
// Registry of live reservations by base address. Process-wide because addresses are process-wide:
// retain(address) and query_access(address) must find the mapping without the reservation's owner.
// The mutex guards the registry and every reservation's mapping table (so lookups never see a table
// being changed); it is never held across a backend call.
std::mutex registry_mutex;
std::map<std::uintptr_t, reservation_state*> registry;  // many entries, inserted anywhere: a tree

std::uintptr_t to_int(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

/// The reservation and mapping covering `address`, or nullptrs. Caller holds registry_mutex.
std::pair<reservation_state*, const std::pair<std::size_t, mapping_record>*> lookup(const void* address) {
  auto a = to_int(address);
  auto it = registry.upper_bound(a);
  if (it == registry.begin()) return {nullptr, nullptr};
  --it;
  reservation_state* r = it->second;
  std::size_t offset = a - it->first;
  if (offset >= r->size) return {nullptr, nullptr};
  auto m = r->mappings.upper_bound(offset);
  if (m == r->mappings.begin()) return {r, nullptr};
  --m;
  if (offset >= m->first + m->second.size) return {r, nullptr};
  return {r, &*m};
}
}  // namespace

result<std::shared_ptr<allocation_state>> find_mapped_allocation(const void* address, const char* op) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto [r, m] = lookup(address);
  if (!m)
    return make_error(errc::not_mapped, op, fmt::format("address={}", address),
                      r ? "the address is reserved but not mapped" : "no pvmm mapping contains the address");
  return m->second.memory;
}

reservation_state::~reservation_state() {
  if (!freed) {  // release() already emptied and freed it otherwise (then no other thread can reach it)
    (void)unmap_all();
    (void)free_range();
  }
  --live_reservations;
}

status reservation_state::free_range() {
  if (freed) return {};
  freed = true;
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    registry.erase(to_int(address));
  }
  return backend::free_reservation(address, size);  // teardown: never fault-injected
}

status reservation_state::unmap_all() {
  status first_failure;
  flat_map<std::size_t, mapping_record> doomed;
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    doomed.swap(mappings);
  }
  for (auto& [offset, m] : doomed) {
    auto ok = backend::unmap(static_cast<char*>(address) + offset, m.size);  // teardown: never fault-injected
    if (!ok && first_failure) first_failure = std::move(ok);
    --live_mappings;
  }
  return first_failure;
}

namespace {

error released_reservation(const char* op) {
  return make_error(errc::already_released, op, "", "this address_reservation is empty (released or moved from)");
}

/// Checks that [offset, offset+size) is within the reservation and covered exactly by whole, adjacent
/// mappings. Caller holds registry_mutex. Returns the first and one-past-last mapping.
result<std::pair<flat_map<std::size_t, mapping_record>::iterator, flat_map<std::size_t, mapping_record>::iterator>>
whole_mappings(reservation_state& r, std::size_t offset, std::size_t size, const char* op, lazy_args args) {
  if (size == 0) return make_error(errc::invalid_size, op, args, "size is zero");
  if (!range_within(offset, size, r.size))
    return make_error(
        errc::out_of_range, op, args,
        fmt::format("[{:#x}, {:#x}) is outside the reservation of size {:#x}", offset, offset + size, r.size));
  auto first = r.mappings.upper_bound(offset);
  if (first != r.mappings.begin()) {
    auto prev = std::prev(first);
    if (offset < prev->first + prev->second.size) {
      if (prev->first != offset)
        return make_error(errc::partial_mapping, op, args,
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
      return make_error(
          errc::not_mapped, op, args,
          fmt::format("[{:#x}, {:#x}) is not mapped", cursor, it == r.mappings.end() ? end : std::min(end, it->first)));
    cursor = it->first + it->second.size;
    ++it;
  }
  if (cursor != end)
    return make_error(errc::partial_mapping, op, args,
                      fmt::format("the range ends at {:#x} inside the mapping that ends at {:#x}", end, cursor),
                      "pvmm works on whole mappings: end at a mapping's last byte");
  return std::make_pair(first, it);
}

/// Marks the whole mappings in [first, last) busy for one operation outside the lock, or says which one another
/// thread holds. Caller holds registry_mutex.
template <class It>
status claim(It first, It last, const char* op, lazy_args args) {
  for (auto it = first; it != last; ++it)
    if (it->second.busy)
      return make_error(errc::busy, op, args,
                        fmt::format("another thread is changing the mapping at [{:#x}, {:#x})", it->first,
                                    it->first + it->second.size),
                        "an address_reservation may be used from several threads on different mappings only");
  for (auto it = first; it != last; ++it) it->second.busy = true;
  return {};
}

/// Clears the busy marks of the mappings at `offsets` that are still recorded. Caller holds registry_mutex.
void release_claim(reservation_state& r, const std::vector<std::pair<std::size_t, std::size_t>>& pieces) {
  for (auto [off, sz] : pieces) {
    (void)sz;
    if (auto it = r.mappings.find(off); it != r.mappings.end()) it->second.busy = false;
  }
}

result<void*> map_state(reservation_state* r, std::size_t offset, const std::shared_ptr<allocation_state>& memory,
                        std::size_t memory_offset, std::size_t size, const char* op) {
  auto args = [&] { return fmt::format("offset={:#x}, memory_offset={:#x}, size={:#x}", offset, memory_offset, size); };
  if (!r) return released_reservation(op);
  if (!memory)
    return make_error(errc::already_released, op, args, "the memory to map is empty (released or moved from)");
  const std::size_t unit = memory->granularity;
  if (size == 0) return make_error(errc::invalid_size, op, args, "size is zero");
  if (size % unit != 0 || offset % unit != 0 || memory_offset % unit != 0)
    return make_error(errc::unaligned, op, args,
                      fmt::format("offset, memory_offset and size must be multiples of the granularity {:#x}", unit));
  if (!range_within(offset, size, r->size))
    return make_error(
        errc::out_of_range, op, args,
        fmt::format("[{:#x}, {:#x}) is outside the reservation of size {:#x}", offset, offset + size, r->size));
  if (!range_within(memory_offset, size, memory->size))
    return make_error(errc::out_of_range, op, args,
                      fmt::format("[{:#x}, {:#x}) is outside the memory of size {:#x}", memory_offset,
                                  memory_offset + size, memory->size));
  if (memory_offset != 0 && memory->what == allocation_state::kind::memory) {
    int ordinal = memory->properties.location.type == location::kind::device ? memory->properties.location.id : 0;
    auto caps = device_capabilities(ordinal);
    if (!caps) return in_operation(std::move(caps).error(), op, args);
    if (!caps->map_at_physical_offset)
      return make_error(
          errc::not_supported, op, args,
          fmt::format("the {} backend cannot map from a nonzero offset into physical memory", backend::info().name),
          "map whole allocations (memory_offset 0), or split the allocation into chunks");
  }
  {
    // Check and claim the range in one critical section; the claim is withdrawn if the backend fails.
    std::lock_guard<std::mutex> lock(registry_mutex);
    auto next = r->mappings.lower_bound(offset);
    if (next != r->mappings.end() && next->first < offset + size)
      return make_error(errc::overlapping_mapping, op, args,
                        fmt::format("[{:#x}, {:#x}) overlaps the mapping at [{:#x}, {:#x})", offset, offset + size,
                                    next->first, next->first + next->second.size),
                        "unmap it first");
    if (next != r->mappings.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second.size > offset)
        return make_error(errc::overlapping_mapping, op, args,
                          fmt::format("[{:#x}, {:#x}) overlaps the mapping at [{:#x}, {:#x})", offset, offset + size,
                                      prev->first, prev->first + prev->second.size),
                          "unmap it first");
    }
    r->mappings.emplace_hint(next, offset, mapping_record{size, memory, memory_offset, true});
  }
  void* address = static_cast<char*>(r->address) + offset;
  auto ok = call_backend("map", [&] { return backend::map(address, size, memory->handle, memory_offset); });
  std::lock_guard<std::mutex> lock(registry_mutex);
  if (!ok) {
    r->mappings.erase(offset);
    return in_operation(std::move(ok).error(), op, args);
  }
  r->mappings.find(offset)->second.busy = false;  // still there: busy kept every other thread off it
  ++live_mappings;
  return address;
}

}  // namespace
}  // namespace detail

using detail::call_backend;
using detail::in_operation;
using detail::make_error;

address_reservation::address_reservation() noexcept = default;
address_reservation::address_reservation(address_reservation&&) noexcept = default;
address_reservation& address_reservation::operator=(address_reservation&&) noexcept = default;
address_reservation::~address_reservation() = default;
address_reservation::address_reservation(std::unique_ptr<detail::reservation_state> state) noexcept
    : state_(std::move(state)) {}

void* address_reservation::address() const noexcept { return state_ ? state_->address : nullptr; }
std::size_t address_reservation::size() const noexcept { return state_ ? state_->size : 0; }
std::size_t address_reservation::mapping_count() const noexcept {
  if (!state_) return 0;
  std::lock_guard<std::mutex> lock(detail::registry_mutex);
  return state_->mappings.size();
}

result<address_reservation> address_reservation::reserve(std::size_t size, std::size_t alignment,
                                                         const void* fixed_address) {
  const char* op = "pvmm::address_reservation::reserve";
  auto args = [&] {
    return fmt::format("size={:#x}, alignment={:#x}, fixed_address={}", size, alignment, fixed_address);
  };
  auto unit = call_backend("reservation_granularity", [] { return detail::backend::reservation_granularity(); });
  if (!unit) return in_operation(std::move(unit).error(), op, args);
  if (size == 0) return make_error(errc::invalid_size, op, args, "size is zero");
  if (size % *unit != 0) {
    auto rounded = detail::checked_round_up(size, *unit);
    if (!rounded)
      return make_error(
          errc::out_of_memory, op, args,
          fmt::format("size rounded up to the reservation granularity {:#x} exceeds the address space", *unit));
    return make_error(errc::unaligned, op, args,
                      fmt::format("size is not a multiple of the reservation granularity {:#x}", *unit),
                      fmt::format("round up to {:#x}", *rounded));
  }
  if (alignment != 0 && (!detail::is_power_of_two(alignment) || alignment % *unit != 0))
    return make_error(errc::invalid_alignment, op, args,
                      fmt::format("alignment must be 0 or a power of two multiple of {:#x}", *unit));
  // A backend may over-reserve by the alignment to trim the range into place: that sum must exist.
  if (alignment > *unit && !detail::checked_add(size, alignment))
    return make_error(errc::out_of_memory, op, args,
                      fmt::format("size {:#x} plus alignment {:#x} exceeds the address space", size, alignment));
  std::size_t effective_alignment = alignment ? alignment : *unit;
  if (fixed_address && detail::to_int(fixed_address) % effective_alignment != 0)
    return make_error(errc::unaligned, op, args,
                      fmt::format("fixed_address is not aligned to {:#x}", effective_alignment));
  auto address = call_backend("reserve", [&] { return detail::backend::reserve(size, alignment, fixed_address); });
  if (!address) return in_operation(std::move(address).error(), op, args);
  if (fixed_address && *address != fixed_address) {
    (void)detail::backend::free_reservation(*address, size);  // rollback: never fault-injected
    return make_error(errc::address_unavailable, op, args,
                      fmt::format("the range landed at {} instead; it was given back", *address),
                      "reserve without a fixed address and remap the physical memory there");
  }
  auto state = std::make_unique<detail::reservation_state>(*address, size);
  {
    std::lock_guard<std::mutex> lock(detail::registry_mutex);
    auto key = detail::to_int(*address);
    detail::registry.emplace_hint(detail::registry.lower_bound(key), key, state.get());
  }
  return address_reservation(std::move(state));
}

result<void*> address_reservation::map(std::size_t offset, const physical_allocation& memory, std::size_t memory_offset,
                                       std::size_t size) {
  return detail::map_state(state_.get(), offset, memory.state(), memory_offset, size, "pvmm::address_reservation::map");
}

result<void*> address_reservation::map(std::size_t offset, const multicast_object& object, std::size_t object_offset,
                                       std::size_t size) {
  return detail::map_state(state_.get(), offset, object.state(), object_offset, size, "pvmm::address_reservation::map");
}

result<void*> address_reservation::map_and_grant(std::size_t offset, const physical_allocation& memory,
                                                 std::size_t memory_offset, std::size_t size,
                                                 std::initializer_list<access_descriptor> grants) {
  auto address = map(offset, memory, memory_offset, size);
  if (!address) return address;
  if (auto ok = set_access(offset, size, grants); !ok) {
    (void)unmap(offset, size);
    return std::move(ok).error();
  }
  return address;
}

status address_reservation::unmap(std::size_t offset, std::size_t size) {
  const char* op = "pvmm::address_reservation::unmap";
  auto args = [&] { return fmt::format("offset={:#x}, size={:#x}", offset, size); };
  if (!state_) return detail::released_reservation(op);
  std::vector<std::pair<std::size_t, std::size_t>> pieces;
  {
    std::lock_guard<std::mutex> lock(detail::registry_mutex);
    auto range = detail::whole_mappings(*state_, offset, size, op, args);
    if (!range) return std::move(range).error();
    if (auto ok = detail::claim(range->first, range->second, op, args); !ok) return ok;
    for (auto it = range->first; it != range->second; ++it) pieces.emplace_back(it->first, it->second.size);
  }
  // Unmap mapping by mapping (HIP needs whole mappings); each one is forgotten as soon as it is gone, so a
  // failure part-way leaves the table true to what is still mapped.
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    auto [off, sz] = pieces[i];
    auto ok = call_backend(
        "unmap", [&, o = off, s = sz] { return detail::backend::unmap(static_cast<char*>(state_->address) + o, s); });
    std::shared_ptr<detail::allocation_state> memory;  // released outside the lock
    {
      std::lock_guard<std::mutex> lock(detail::registry_mutex);
      if (!ok) {
        detail::release_claim(*state_, pieces);
        return in_operation(std::move(ok).error(), op, args);
      }
      auto it = state_->mappings.find(off);  // present: the claim kept other threads' unmaps off it
      memory = std::move(it->second.memory);
      state_->mappings.erase(it);
    }
    --detail::live_mappings;
  }
  return {};
}

status address_reservation::set_access(std::size_t offset, std::size_t size, const access_descriptor* grants,
                                       std::size_t count) {
  const char* op = "pvmm::address_reservation::set_access";
  auto args = [&] { return fmt::format("offset={:#x}, size={:#x}, grants={}", offset, size, count); };
  if (!state_) return detail::released_reservation(op);
  if (grants == nullptr || count == 0) return make_error(errc::invalid_argument, op, args, "no access grants given");
  for (std::size_t i = 0; i < count; ++i) {
    const auto& g = grants[i];
    if (g.location.type != location::kind::device && g.location.type != location::kind::host &&
        g.location.type != location::kind::host_numa)
      return make_error(errc::invalid_location, op, args, fmt::format("grant {} has an unknown location kind", i));
    if (auto ok = detail::check_location(g.location, op, args); !ok) return ok;
    if (g.access != access::none && g.access != access::read && g.access != access::read_write)
      return make_error(errc::invalid_argument, op, args,
                        fmt::format("grant {} has an unknown access value {}", i, static_cast<int>(g.access)));
    for (std::size_t j = 0; j < i; ++j)
      if (grants[j].location == g.location)
        return make_error(errc::invalid_argument, op, args,
                          fmt::format("grants {} and {} both name {}", j, i, detail::describe(g.location)));
  }
  std::vector<std::pair<std::size_t, std::size_t>> claimed;  // every mapping in the range, held for the call
  std::vector<std::pair<std::size_t, std::size_t>> pieces;   // the driver calls to make
  {
    std::lock_guard<std::mutex> lock(detail::registry_mutex);
    auto range = detail::whole_mappings(*state_, offset, size, op, args);
    if (!range) return std::move(range).error();
    if (auto ok = detail::claim(range->first, range->second, op, args); !ok) return ok;
    for (auto it = range->first; it != range->second; ++it) claimed.emplace_back(it->first, it->second.size);
    if (detail::backend::set_access_spans_mappings())
      pieces.emplace_back(offset, size);  // one driver call over the whole range
    else
      pieces = claimed;
  }
  status outcome;
  for (auto [off, sz] : pieces) {
    outcome = call_backend("set_access", [&, o = off, s = sz] {
      return detail::backend::set_access(static_cast<char*>(state_->address) + o, s, grants, count);
    });
    if (!outcome) break;
  }
  std::lock_guard<std::mutex> lock(detail::registry_mutex);
  detail::release_claim(*state_, claimed);
  if (!outcome) return in_operation(std::move(outcome).error(), op, args);
  return {};
}

status address_reservation::release() noexcept {
  const char* op = "pvmm::address_reservation::release";
  if (!state_) return detail::released_reservation(op);
  {
    std::lock_guard<std::mutex> lock(detail::registry_mutex);
    if (std::size_t mapped = state_->mappings.size(); mapped != 0)
      return make_error(errc::busy, op, fmt::format("address={}, size={:#x}", state_->address, state_->size),
                        fmt::format("{} mapping(s) remain in the range", mapped), "unmap them first");
    detail::registry.erase(detail::to_int(state_->address));
    state_->freed = true;
  }
  auto ok = call_backend("free_reservation",
                         [&] { return detail::backend::free_reservation(state_->address, state_->size); });
  state_.reset();
  if (!ok) return in_operation(std::move(ok).error(), op, "");
  return {};
}

result<access> query_access(location where, const void* address) {
  const char* op = "pvmm::query_access";
  auto args = [&] { return fmt::format("location={}, address={}", detail::describe(where), address); };
  if (auto ok = detail::check_location(where, op, args); !ok) return std::move(ok).error();
  {
    auto found = detail::find_mapped_allocation(address, op);
    if (!found) return std::move(found).error();
  }
  auto a = call_backend("get_access", [&] { return detail::backend::get_access(where, address); });
  if (!a) return in_operation(std::move(a).error(), op, args);
  return a;
}

}  // namespace pvmm
