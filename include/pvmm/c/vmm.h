/* pvmm/c/vmm.h - physical memory, reservations, mappings, access, test copies and dma-buf export (part of pvmm/pvmm.h,
 * C11; include <pvmm/pvmm.h> for everything). */
#ifndef PVMM_C_VMM_H
#define PVMM_C_VMM_H

#include <pvmm/c/devices.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- physical memory, reservations, mappings, access ----------------------------------------------------------- */

PVMM_C_API pvmm_status pvmm_allocation_create(size_t size, const pvmm_allocation_properties* properties,
                                              pvmm_allocation* out) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_allocation_retain(const void* address, pvmm_allocation* out) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_allocation_release(pvmm_allocation allocation) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_allocation_size(pvmm_allocation allocation, size_t* size) PVMM_C_NOEXCEPT;
/** A new POSIX fd naming the allocation; the caller owns it (close it). */
PVMM_C_API pvmm_status pvmm_allocation_export_posix_fd(pvmm_allocation allocation, int* fd) PVMM_C_NOEXCEPT;
/** Imports an exported fd (borrowed: the caller still closes it). */
PVMM_C_API pvmm_status pvmm_allocation_import_posix_fd(int fd, size_t size, pvmm_allocation* out) PVMM_C_NOEXCEPT;
typedef struct pvmm_fabric_handle {
  uint8_t bytes[64];
} pvmm_fabric_handle;
PVMM_C_API pvmm_status pvmm_allocation_export_fabric(pvmm_allocation allocation,
                                                     pvmm_fabric_handle* handle) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_allocation_import_fabric(const pvmm_fabric_handle* handle, size_t size,
                                                     pvmm_allocation* out) PVMM_C_NOEXCEPT;

PVMM_C_API pvmm_status pvmm_reservation_create(size_t size, size_t alignment, const void* fixed_address,
                                               pvmm_reservation* out) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_reservation_release(pvmm_reservation reservation) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_reservation_address(pvmm_reservation reservation, void** address) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_reservation_size(pvmm_reservation reservation, size_t* size) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_reservation_map(pvmm_reservation reservation, size_t offset, pvmm_allocation memory,
                                            size_t memory_offset, size_t size, void** address) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_reservation_unmap(pvmm_reservation reservation, size_t offset, size_t size) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_reservation_set_access(pvmm_reservation reservation, size_t offset, size_t size,
                                                   const pvmm_access_descriptor* grants, size_t count) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_query_access(pvmm_location where, const void* address, int* access) PVMM_C_NOEXCEPT;

/** Copies host bytes into mapped memory, or back, through `device` (-1: the first device with access): memcpy on the
 * host backend, a synchronous device copy on a GPU (pvmm::testing::copy_to_mapping). For tests and examples. */
PVMM_C_API pvmm_status pvmm_copy_to_mapping(void* destination, const void* source, size_t size,
                                            int device) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_copy_from_mapping(void* destination, const void* source, size_t size,
                                              int device) PVMM_C_NOEXCEPT;

/** One piece of a dma-buf export: the fd (the caller closes it) whose byte 0 is at `address`. */
typedef struct pvmm_dmabuf_piece {
  int fd;
  void* address;
  size_t size;
} pvmm_dmabuf_piece;

/** One dma-buf per mapping [address, address + size) covers (a buffer spanning chunks gives several), what a NIC
 * registers (ibv_reg_dmabuf_mr). Checked in this order: the arguments (address and size must be multiples of the
 * page size: pvmm_status_unaligned; NULL: invalid_argument; size 0: invalid_size; a range wrapping the address
 * space: out_of_range); the range is wholly mapped in pvmm reservations side by side (not_mapped); then the
 * capability (pvmm_device_info.sharing_dmabuf) for the device of every piece's memory: pvmm_status_not_supported
 * with the reason where the backend or driver lacks it (the host backend always; host-located memory too). Writes
 * at most `capacity` pieces; *count is the number the range needs (also when capacity is too small, then
 * pvmm_status_out_of_range and no fd is left open). */
PVMM_C_API pvmm_status pvmm_export_dmabuf(const void* address, size_t size, pvmm_dmabuf_piece* pieces, size_t capacity,
                                          size_t* count) PVMM_C_NOEXCEPT;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PVMM_C_VMM_H */
