// pvmm/device.hpp - the configured backend, its devices, their capabilities and granularities.
#pragma once

#include <pvmm/error.hpp>
#include <pvmm/types.hpp>

namespace pvmm {

/// The backend this build was configured with, and whether it can run here.
backend_info query_backend();

/// Number of devices; 0 (not an error) when the backend is unavailable.
result<int> device_count();

/// One device's name and capabilities.
result<device_info> query_device(int ordinal);

/// Minimum and recommended granularity for allocations with these properties.
result<granularity> query_granularity(const allocation_properties& properties);

/// The unit of address_reservation::reserve: sizes must be multiples of it and every range is aligned to at least
/// it. It is the largest minimum granularity of device memory over all devices, so any device's memory can be
/// mapped in any reservation.
result<std::size_t> reservation_granularity();

/// Whether `device` can access memory that lives on `peer` (cuDeviceCanAccessPeer / hipDeviceCanAccessPeer;
/// a device can always access its own memory). Pick devices with it before granting a peer access.
result<bool> can_access_peer(int device, int peer);

/// Free and total memory of a device (for leak checks and budgets).
result<memory_info> query_memory(int ordinal);

}  // namespace pvmm
