// The C interface: the backend, devices, capabilities, granularities (pvmm/pvmm.h over pvmm/device.hpp).
#include <cstdio>

#include <pvmm/device.hpp>

#include "c_api/abi.hpp"
#include "c_api/common.hpp"
#include "c_api/convert.hpp"

namespace pvmm::c_api {

result<location> to_location(const pvmm_location& l, const char* operation) {
  switch (l.kind) {
    case pvmm_location_device:
      return location::device(l.id);
    case pvmm_location_host:
      return location::host();
    case pvmm_location_host_numa:
      return location::host_numa(l.id);
    default:
      break;
  }
  error e;
  e.code = errc::invalid_location;
  e.operation = operation;
  e.detail = "location kind " + std::to_string(l.kind) + " is not a pvmm_location_kind (0 device, 1 host, 2 host_numa)";
  return e;
}

result<access> to_access(int a, const char* operation) {
  if (a >= pvmm_access_none && a <= pvmm_access_read_write) return static_cast<access>(a);
  error e;
  e.code = errc::invalid_argument;
  e.operation = operation;
  e.detail = "access " + std::to_string(a) + " is not a pvmm_access (0 none, 1 read, 2 read_write)";
  return e;
}

result<allocation_properties> to_properties(const pvmm_allocation_properties* p, const char* operation) {
  error e;
  e.operation = operation;
  if (p == nullptr) {
    e.code = errc::invalid_argument;
    e.detail = "properties is NULL";
    return e;
  }
  static_assert(first_published<pvmm_allocation_properties>::size == sizeof(pvmm_allocation_properties),
                "grew: use read_prefix");
  if (!size_readable<pvmm_allocation_properties>(p->struct_size)) {
    e.code = errc::version_mismatch;
    e.detail = "pvmm_allocation_properties.struct_size is " + std::to_string(p->struct_size) + "; this library knows " +
               std::to_string(sizeof(pvmm_allocation_properties)) +
               " (set it with PVMM_INIT(pvmm_allocation_properties))";
    return e;
  }
  if ((p->exportable & ~unsigned{pvmm_handle_posix_fd | pvmm_handle_fabric}) != 0) {
    e.code = errc::invalid_argument;
    e.detail = "exportable holds bits that are not pvmm_handle_* values";
    return e;
  }
  auto where = to_location(p->location, operation);
  if (!where) return std::move(where).error();
  allocation_properties out;
  out.location = *where;
  out.exportable = static_cast<handle_types>(p->exportable);
  out.gpu_direct_rdma = p->gpu_direct_rdma != 0;
  out.compression = p->compression != 0;
  return out;
}

result<std::vector<access_descriptor>> to_grants(const pvmm_access_descriptor* grants, std::size_t count,
                                                 const char* operation) {
  std::vector<access_descriptor> out;
  if (grants == nullptr && count != 0) {
    error e;
    e.code = errc::invalid_argument;
    e.operation = operation;
    e.detail = "grants is NULL with count " + std::to_string(count);
    return e;
  }
  out.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    auto where = to_location(grants[i].location, operation);
    if (!where) return std::move(where).error();
    auto what = to_access(grants[i].access, operation);
    if (!what) return std::move(what).error();
    out.push_back({*where, *what});
  }
  return out;
}

}  // namespace pvmm::c_api

using namespace pvmm::c_api;

extern "C" {

pvmm_status pvmm_query_backend(pvmm_backend_info* info) noexcept {
  constexpr const char* op = "pvmm_query_backend";
  return guard(op, [&] {
    PVMM_C_NEED(info, op);
    PVMM_C_SIZE(info, pvmm_backend_info, op);
    const pvmm::backend_info b = pvmm::query_backend();
    copy_text(info->name, sizeof info->name, b.name);
    copy_text(info->runtime_version, sizeof info->runtime_version, b.runtime_version);
    copy_text(info->driver_version, sizeof info->driver_version, b.driver_version);
    info->available = b.available ? 1 : 0;
    copy_text(info->unavailable_reason, sizeof info->unavailable_reason, b.unavailable_reason);
    info->unavailable_code = static_cast<int>(b.unavailable_code);
    info->refused_devices = b.refused_devices;
    return pvmm_status_ok;
  });
}

pvmm_status pvmm_device_count(int* count) noexcept {
  return outputs_call(
      "pvmm_device_count", {{count, "count"}}, [] { return pvmm::device_count(); }, [&](int n) { *count = n; });
}

pvmm_status pvmm_query_device(int ordinal, pvmm_device_info* info) noexcept {
  constexpr const char* op = "pvmm_query_device";
  return guard(op, [&] {
    PVMM_C_NEED(info, op);
    PVMM_C_SIZE(info, pvmm_device_info, op);
    PVMM_C_TRY(d, pvmm::query_device(ordinal));
    const pvmm::capabilities& c = d->capabilities;
    info->ordinal = d->ordinal;
    copy_text(info->name, sizeof info->name, d->name);
    copy_text(info->identifier, sizeof info->identifier, d->identifier);
    info->total_memory = d->total_memory;
    info->vmm_supported = c.vmm.supported;
    info->vmm_host_location = c.vmm.host_location;
    info->vmm_host_numa_location = c.vmm.host_numa_location;
    info->vmm_compression = c.vmm.compression;
    info->vmm_gpu_direct_rdma = c.vmm.gpu_direct_rdma;
    info->vmm_map_at_physical_offset = c.vmm.map_at_physical_offset;
    info->vmm_map_part_of_allocation = c.vmm.map_part_of_allocation;
    info->vmm_host_access_to_device_memory = c.vmm.host_access_to_device_memory;
    info->vmm_host_numa_id = c.vmm.host_numa_id;
    info->sharing_posix_fd = c.sharing.posix_fd;
    info->sharing_fabric = c.sharing.fabric;
    info->sharing_dmabuf = c.sharing.dmabuf;
    info->multicast_supported = c.multicast.supported;
    info->pools_supported = c.pools.supported;
    info->pools_host_location = c.pools.host_location;
    info->pools_max_size = c.pools.max_size;
    info->pools_ipc_posix_fd = c.pools.ipc_posix_fd;
    info->managed_supported = c.managed.supported;
    info->managed_concurrent_access = c.managed.concurrent_access;
    info->managed_pages_migrate = c.managed.pages_migrate;
    info->managed_pageable_memory_access = c.managed.pageable_memory_access;
    info->host_memory_pinned = c.host_memory.pinned;
    info->host_memory_registration = c.host_memory.registration;
    info->host_memory_mapped = c.host_memory.mapped;
    info->host_memory_device_pointer_is_host_pointer = c.host_memory.device_pointer_is_host_pointer;
    info->managed_host_numa_locations = c.managed.host_numa_locations;
    info->managed_location_attributes = c.managed.location_attributes;
    return pvmm_status_ok;
  });
}

pvmm_status pvmm_query_granularity(const pvmm_allocation_properties* properties, size_t* minimum,
                                   size_t* recommended) noexcept {
  constexpr const char* op = "pvmm_query_granularity";
  return guard(op, [&] {
    PVMM_C_NEED(minimum, op);
    PVMM_C_TRY(p, to_properties(properties, op));
    PVMM_C_TRY(g, pvmm::query_granularity(*p));
    *minimum = g->minimum;
    if (recommended != nullptr) *recommended = g->recommended;
    return pvmm_status_ok;
  });
}

pvmm_status pvmm_reservation_granularity(size_t* granularity) noexcept {
  return outputs_call(
      "pvmm_reservation_granularity", {{granularity, "granularity"}}, [] { return pvmm::reservation_granularity(); },
      [&](std::size_t g) { *granularity = g; });
}

pvmm_status pvmm_can_access_peer(int device, int peer, int* can_access) noexcept {
  return outputs_call(
      "pvmm_can_access_peer", {{can_access, "can_access"}}, [&] { return pvmm::can_access_peer(device, peer); },
      [&](bool r) { *can_access = r ? 1 : 0; });
}

pvmm_status pvmm_query_memory(int ordinal, size_t* free_bytes, size_t* total_bytes, int* shared_with_system) noexcept {
  return outputs_call(
      "pvmm_query_memory", {{free_bytes, "free_bytes"}, {total_bytes, "total_bytes"}},
      [&] { return pvmm::query_memory(ordinal); },
      [&](const auto& m) {
        *free_bytes = m.free;
        *total_bytes = m.total;
        if (shared_with_system != nullptr) *shared_with_system = m.shared_with_system ? 1 : 0;
      });
}

}  // extern "C"
