// address_reservation: the range's lifetime (reserve, release) and the checks every call on its mappings makes
// (reservation_checks.hpp). Its mappings: reservation_map.cpp; access control: reservation_access.cpp; the marks
// their claims leave on mapping records: claim_marks.hpp.
//
// Hot layout: address_reservation::reserve and ::release are listed by mangled name in cmake/hot_layout.ld; a
// rename or a new signature drops one out of it (ctest -R hot_layout says so).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include <fmt/format.h>

#include <pvmm/reservation.hpp>

#include "backend/vmm.hpp"
#include "core/address_registry.hpp"
#include "core/checked_math.hpp"
#include "core/device.hpp"
#include "observe/observe.hpp"
#include "vmm/reservation_checks.hpp"

namespace pvmm {
namespace detail {

error released_reservation(const operation& op) {
  return op.fail(errc::already_released, "this address_reservation is empty (released or moved from)");
}

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

error busy_mapping(mapping_table::iterator it, const operation& op) {
  return op.fail(
      errc::busy,
      fmt::format("another thread is changing the mapping at [{:#x}, {:#x})", it->first, it->first + it->second.size),
      "an address_reservation may be used from several threads on different mappings only");
}

}  // namespace detail

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

}  // namespace pvmm
