// Device queries the neutral layer asks on every operation, cached (devices, attributes and granularities do
// not change while the process runs), and the checks built on them.
#pragma once

#include <atomic>
#include <cstddef>

#include <pvmm/types.hpp>

#include "core/operation.hpp"

namespace pvmm::detail {

/// The device count, asked of the backend once it is nonzero.
result<int> cached_device_count();
/// Granularities by properties.
result<granularity> cached_granularity(const allocation_properties& properties);
/// A device's capabilities, assembled from every feature of the backend.
result<capabilities> device_capabilities(int ordinal);
/// The reservation unit once known (0 until then), for reservation_unit's inline common case. Hidden: see
/// live_allocations (core/ownership.hpp).
[[gnu::visibility("hidden")]] extern std::atomic<std::size_t> known_reservation_unit;
/// reservation_unit's first answer: asks every device's granularity.
result<std::size_t> reservation_unit_uncached();
/// Size and alignment unit of address reservations: the largest minimum granularity over all devices, so
/// any device's memory can be mapped anywhere in any reservation. Cached: every reserve asks, inline.
inline result<std::size_t> reservation_unit() {
  if (std::size_t unit = known_reservation_unit.load(std::memory_order_relaxed)) return unit;
  return reservation_unit_uncached();
}
/// The device count once known (nonzero; 0 until then), for check_location's inline common case.
[[gnu::visibility("hidden")]] extern std::atomic<int> known_device_count;
/// check_location's whole check, every kind (and a device before the count is known).
status check_location_uncached(location where, const operation& op);
/// Validates a location for physical memory or access (device ordinal exists, ids in range). Every
/// stream-ordered call checks its stream's device: that common case is one load and a compare, inline (a call
/// returning a status costs more than the check).
inline status check_location(location where, const operation& op) {
  if (where.type == location::kind::device && where.id >= 0 &&
      where.id < known_device_count.load(std::memory_order_relaxed))
    return {};
  return check_location_uncached(where, op);
}
/// The device of physical memory placed at `where` (host locations: device 0, whose capabilities apply).
inline int device_of(location where) noexcept { return where.type == location::kind::device ? where.id : 0; }

}  // namespace pvmm::detail
