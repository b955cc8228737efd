// Device queries the neutral layer asks on every operation, cached (devices, attributes and granularities do
// not change while the process runs), and the checks built on them.
#pragma once

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
/// Size and alignment unit of address reservations: the largest minimum granularity over all devices, so
/// any device's memory can be mapped anywhere in any reservation.
result<std::size_t> reservation_unit();
/// Validates a location for physical memory or access (device ordinal exists, ids in range).
status check_location(location where, const operation& op);
/// The device of physical memory placed at `where` (host locations: device 0, whose capabilities apply).
inline int device_of(location where) noexcept { return where.type == location::kind::device ? where.id : 0; }

}  // namespace pvmm::detail
