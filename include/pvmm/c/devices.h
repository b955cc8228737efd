/* pvmm/c/devices.h - devices, locations, capabilities and allocation properties (part of pvmm/pvmm.h, C11; include
 * <pvmm/pvmm.h> for everything). */
#ifndef PVMM_C_DEVICES_H
#define PVMM_C_DEVICES_H

#include <pvmm/c/common.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- devices and capabilities ---------------------------------------------------------------------------------- */

typedef enum pvmm_location_kind {
  pvmm_location_device = 0,
  pvmm_location_host = 1,
  pvmm_location_host_numa = 2
} pvmm_location_kind;

typedef struct pvmm_location {
  int kind; /**< pvmm_location_kind */
  int id;   /**< device ordinal, NUMA node, 0 for host */
} pvmm_location;

typedef enum pvmm_access { pvmm_access_none = 0, pvmm_access_read = 1, pvmm_access_read_write = 2 } pvmm_access;

typedef struct pvmm_access_descriptor {
  pvmm_location location;
  int access; /**< pvmm_access */
} pvmm_access_descriptor;

/** Handle types, combined with |. */
enum { pvmm_handle_none = 0, pvmm_handle_posix_fd = 1, pvmm_handle_fabric = 2 };

typedef struct pvmm_backend_info {
  size_t struct_size;
  char name[16]; /**< "cuda", "hip", "host" */
  char runtime_version[64];
  char driver_version[64];
  int available; /**< 0: see unavailable_reason / unavailable_code */
  char unavailable_reason[256];
  int unavailable_code;
  int refused_devices;
} pvmm_backend_info;
#define PVMM_C_DEFAULTS_pvmm_backend_info(F)

/** Capabilities, one flag (0/1) per field of pvmm::capabilities. */
typedef struct pvmm_device_info {
  size_t struct_size;
  int ordinal;
  char name[256];
  char identifier[64];
  size_t total_memory;
  int vmm_supported, vmm_host_location, vmm_host_numa_location, vmm_compression, vmm_gpu_direct_rdma,
      vmm_map_at_physical_offset, vmm_map_part_of_allocation, vmm_host_access_to_device_memory, vmm_host_numa_id;
  int sharing_posix_fd, sharing_fabric, sharing_dmabuf;
  int multicast_supported;
  int pools_supported, pools_host_location, pools_max_size, pools_ipc_posix_fd;
  int managed_supported, managed_concurrent_access, managed_pages_migrate, managed_pageable_memory_access;
  int host_memory_pinned, host_memory_registration, host_memory_mapped, host_memory_device_pointer_is_host_pointer;
  int managed_host_numa_locations, managed_location_attributes;
} pvmm_device_info;
#define PVMM_C_DEFAULTS_pvmm_device_info(F)

typedef struct pvmm_allocation_properties {
  size_t struct_size;
  pvmm_location location;
  unsigned exportable; /**< pvmm_handle_* bits */
  int gpu_direct_rdma;
  int compression;
} pvmm_allocation_properties;
#define PVMM_C_DEFAULTS_pvmm_allocation_properties(F)

PVMM_C_API pvmm_status pvmm_query_backend(pvmm_backend_info* info) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_device_count(int* count) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_query_device(int ordinal, pvmm_device_info* info) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_query_granularity(const pvmm_allocation_properties* properties, size_t* minimum,
                                              size_t* recommended) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_reservation_granularity(size_t* granularity) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_can_access_peer(int device, int peer, int* can_access) PVMM_C_NOEXCEPT;
/** Free and total bytes of a device's memory; *shared_with_system (may be NULL) is 1 where `free` is the host's and
 * moves with everything else the system does (the host backend). */
PVMM_C_API pvmm_status pvmm_query_memory(int ordinal, size_t* free_bytes, size_t* total_bytes,
                                         int* shared_with_system) PVMM_C_NOEXCEPT;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PVMM_C_DEVICES_H */
