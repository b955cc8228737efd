/* pvmm/pvmm.h - the C interface (C11, also compiles as C++): a stable ABI over the C++ library for the runtimes
 * written in C (UCX, Open MPI, libfabric, OpenSHMEM, NIXL).
 *
 * Conventions (every entry point):
 * - returns pvmm_status: pvmm_status_ok (0) or a code equal to the C++ pvmm::errc value (both come from
 *   PVMM_ERRC_LIST in pvmm/errc_list.h); results go through out-parameters, written only on success;
 * - a failure also fills this thread's last-error record (pvmm_last_error_*): the whole message, the operation, the
 *   arguments, the detail, the native error and a hint; a success leaves it as it was;
 * - never throws, never aborts: a C++ exception (std::bad_alloc included) is caught and reported as a status;
 * - handles are small values ({0} is the null handle) naming entries of a registry with generation counters: a
 *   null, foreign, freed or double-freed handle, or one of another type, is pvmm_status_invalid_handle with a
 *   message saying which, never a crash;
 * - every options struct starts with `struct_size` (set it to sizeof the struct you were compiled with:
 *   PVMM_INIT sets it); a size pvmm does not know is pvmm_status_version_mismatch. Fields are only ever appended.
 *
 * Threading: as the C++ owners (a handle is one owner): different handles from any thread; the last-error record is
 * per thread. Releasing a handle while another thread uses it is not allowed (the registry keeps that from crashing:
 * the other call finishes on the object it had looked up, or sees an invalid handle).
 */
#ifndef PVMM_PVMM_H
#define PVMM_PVMM_H

#include <stddef.h>
#include <stdint.h>

#include <pvmm/errc_list.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define PVMM_C_API __attribute__((visibility("default")))
#else
#define PVMM_C_API
#endif
#ifdef __cplusplus
#define PVMM_C_NOEXCEPT noexcept /* no exception ever leaves an entry point */
#else
#define PVMM_C_NOEXCEPT
#endif

/** The version of this interface: major * 10000 + minor * 100 + patch of the library that declares it. */
#define PVMM_C_API_VERSION 100
PVMM_C_API int pvmm_c_api_version(void) PVMM_C_NOEXCEPT;

/* ---- status codes and the last error ------------------------------------------------------------------------- */

/** pvmm_status_ok, or one of PVMM_ERRC_LIST: pvmm_status_invalid_argument (1), ..., equal to pvmm::errc. */
typedef enum pvmm_status {
  pvmm_status_ok = 0,
#define PVMM_C_STATUS_ENUMERATOR(name, value, meaning) pvmm_status_##name = value,
  PVMM_ERRC_LIST(PVMM_C_STATUS_ENUMERATOR)
#undef PVMM_C_STATUS_ENUMERATOR
      pvmm_status_force_int = 0x7fffffff
} pvmm_status;

/** The stable name of a code ("overlapping_mapping"; "ok" for 0, "unknown" for a value not in the list). */
PVMM_C_API const char* pvmm_status_name(int status) PVMM_C_NOEXCEPT;

/** This thread's last failure (pvmm_status_ok when none since the thread began or pvmm_clear_last_error). The
 * strings stay valid until this thread's next failing pvmm call or pvmm_clear_last_error; never NULL (""). */
PVMM_C_API pvmm_status pvmm_last_error_code(void) PVMM_C_NOEXCEPT;
PVMM_C_API const char* pvmm_last_error_message(void) PVMM_C_NOEXCEPT; /**< one line holding everything below */
PVMM_C_API const char* pvmm_last_error_operation(void) PVMM_C_NOEXCEPT;
PVMM_C_API const char* pvmm_last_error_arguments(void) PVMM_C_NOEXCEPT;
PVMM_C_API const char* pvmm_last_error_detail(void) PVMM_C_NOEXCEPT;
PVMM_C_API const char* pvmm_last_error_native_name(void)
    PVMM_C_NOEXCEPT; /**< "CUDA_ERROR_INVALID_VALUE", "EBADF", or "" */
PVMM_C_API long long pvmm_last_error_native_code(void) PVMM_C_NOEXCEPT;
PVMM_C_API const char* pvmm_last_error_hint(void) PVMM_C_NOEXCEPT;
PVMM_C_API void pvmm_clear_last_error(void) PVMM_C_NOEXCEPT;

/** Sets struct_size of an options struct, the other fields zero: `pvmm_window_options o =
 * PVMM_INIT(pvmm_window_options);`. (A designated initializer in C, which -Wmissing-field-initializers accepts; a value
 * in C++.) */
#ifdef __cplusplus
#define PVMM_INIT(type)               \
  ([] {                               \
    type init_{};                     \
    init_.struct_size = sizeof(type); \
    return init_;                     \
  }())
#else
#define PVMM_INIT(type) \
  { .struct_size = sizeof(type) }
#endif

/* ---- handles --------------------------------------------------------------------------------------------------- */

typedef struct pvmm_allocation {
  uint64_t id;
} pvmm_allocation; /**< physical memory (pvmm::physical_allocation) */
typedef struct pvmm_reservation {
  uint64_t id;
} pvmm_reservation; /**< pvmm::address_reservation */
typedef struct pvmm_growable {
  uint64_t id;
} pvmm_growable; /**< pvmm::growable_buffer */
typedef struct pvmm_pinned {
  uint64_t id;
} pvmm_pinned; /**< pvmm::pinned_allocation */
typedef struct pvmm_managed {
  uint64_t id;
} pvmm_managed; /**< pvmm::managed_allocation */
typedef struct pvmm_bootstrap {
  uint64_t id;
} pvmm_bootstrap; /**< std::shared_ptr<pvmm::bootstrap> */
typedef struct pvmm_team {
  uint64_t id;
} pvmm_team; /**< pvmm::team */
typedef struct pvmm_window {
  uint64_t id;
} pvmm_window; /**< pvmm::symmetric_window */

typedef struct pvmm_stream {
  uint64_t id;
} pvmm_stream; /**< pvmm::stream (one pvmm created) */
typedef struct pvmm_event {
  uint64_t id;
} pvmm_event; /**< pvmm::event */
typedef struct pvmm_pool {
  uint64_t id;
} pvmm_pool; /**< pvmm::memory_pool */

typedef struct pvmm_listener {
  uint64_t id;
} pvmm_listener; /**< pvmm::ipc::listener: a named endpoint of the fd transport */
typedef struct pvmm_connection {
  uint64_t id;
} pvmm_connection; /**< pvmm::ipc::connection */

typedef struct pvmm_imported {
  uint64_t id;
} pvmm_imported; /**< pvmm::imported_buffer: a multi-chunk buffer rebuilt from a descriptor */
typedef struct pvmm_pool_allocation {
  uint64_t id;
} pvmm_pool_allocation; /**< pvmm::pool_allocation: an allocation imported from another process's pool */

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

typedef struct pvmm_allocation_properties {
  size_t struct_size;
  pvmm_location location;
  unsigned exportable; /**< pvmm_handle_* bits */
  int gpu_direct_rdma;
  int compression;
} pvmm_allocation_properties;

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
 * registers (ibv_reg_dmabuf_mr). The capability (pvmm_device_info.sharing_dmabuf) is checked first:
 * pvmm_status_not_supported with the reason where the backend or driver lacks it (the host backend always). Writes
 * at most `capacity` pieces; *count is the number the range needs (also when capacity is too small, then
 * pvmm_status_out_of_range and no fd is left open). */
PVMM_C_API pvmm_status pvmm_export_dmabuf(const void* address, size_t size, pvmm_dmabuf_piece* pieces, size_t capacity,
                                          size_t* count) PVMM_C_NOEXCEPT;

/* ---- the fd transport: named endpoints, fds and bytes between processes of one node ---------------------------- */

/** Listens on `name` (an abstract name, or a path starting with '/'; pvmm/endpoint.hpp). */
PVMM_C_API pvmm_status pvmm_listen(const char* name, pvmm_listener* out) PVMM_C_NOEXCEPT;
/** Accepts one peer running as the same user, waiting at most `timeout_ms`. */
PVMM_C_API pvmm_status pvmm_listener_accept(pvmm_listener listener, int64_t timeout_ms,
                                            pvmm_connection* out) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_listener_release(pvmm_listener listener) PVMM_C_NOEXCEPT;
/** Connects to the listener on `name` (same user), waiting for it to appear at most `timeout_ms`. */
PVMM_C_API pvmm_status pvmm_connect(const char* name, int64_t timeout_ms, pvmm_connection* out) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_connection_release(pvmm_connection connection) PVMM_C_NOEXCEPT;
/** Sends `count` fds (borrowed: still the caller's) and `payload_size` bytes in one message. */
PVMM_C_API pvmm_status pvmm_connection_send(pvmm_connection connection, const int* fds, size_t count,
                                            const void* payload, size_t payload_size,
                                            int64_t timeout_ms) PVMM_C_NOEXCEPT;
/** Receives one message: at most `max_fds` fds (now the caller's: close them) and `max_payload` bytes. */
PVMM_C_API pvmm_status pvmm_connection_receive(pvmm_connection connection, int* fds, size_t max_fds, size_t* fd_count,
                                               void* payload, size_t max_payload, size_t* payload_size,
                                               int64_t timeout_ms) PVMM_C_NOEXCEPT;

/* ---- growable buffers ------------------------------------------------------------------------------------------ */

typedef struct pvmm_growable_options {
  size_t struct_size;
  pvmm_allocation_properties properties; /**< its own struct_size is checked too */
  const pvmm_access_descriptor* access;  /**< at least one grant */
  size_t access_count;
  size_t chunk_size;   /**< 0: the library's default */
  size_t reserve_size; /**< 0: the library's default */
} pvmm_growable_options;

PVMM_C_API pvmm_status pvmm_growable_create(const pvmm_growable_options* options, pvmm_growable* out) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_growable_release(pvmm_growable buffer) PVMM_C_NOEXCEPT;
/** Grows (or shrinks) to `size`; *moved (may be NULL) is 1 when the data moved to a new address. */
PVMM_C_API pvmm_status pvmm_growable_resize(pvmm_growable buffer, size_t size, int* moved) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_growable_data(pvmm_growable buffer, void** data, size_t* size) PVMM_C_NOEXCEPT;

/* ---- descriptors: a multi-chunk buffer exported as bytes plus fds, rebuilt contiguous by the importer ---------- */

/** Exports every chunk of `buffer` (kind pvmm_handle_posix_fd or pvmm_handle_fabric) as a serialized descriptor of
 * *length bytes and *fd_count fds (the caller's: send them, then close them). Where `capacity` or `fd_capacity` is
 * too small: pvmm_status_out_of_range, *length and *fd_count say what is needed, and no fd is left open. */
PVMM_C_API pvmm_status pvmm_growable_export(pvmm_growable buffer, unsigned kind, uint8_t* bytes, size_t capacity,
                                            size_t* length, int* fds, size_t fd_capacity,
                                            size_t* fd_count) PVMM_C_NOEXCEPT;
/** Rebuilds a buffer from a descriptor's bytes and its fds (borrowed), mapped contiguously with `grants`. Nothing
 * in the bytes is trusted (pvmm_status_protocol_error for malformed ones). */
PVMM_C_API pvmm_status pvmm_import_buffer(const uint8_t* bytes, size_t length, const int* fds, size_t fd_count,
                                          const pvmm_access_descriptor* grants, size_t grant_count,
                                          pvmm_imported* out) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_imported_data(pvmm_imported buffer, void** data, size_t* size) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_imported_release(pvmm_imported buffer) PVMM_C_NOEXCEPT;

/* ---- pinned and managed memory --------------------------------------------------------------------------------- */

typedef struct pvmm_pinned_options {
  size_t struct_size;
  int portable;       /**< default 1 */
  int mapped;         /**< default 1 */
  int write_combined; /**< default 0 */
} pvmm_pinned_options;

/** `options` may be NULL (the defaults). */
PVMM_C_API pvmm_status pvmm_pinned_create(size_t size, const pvmm_pinned_options* options,
                                          pvmm_pinned* out) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_pinned_release(pvmm_pinned memory) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_pinned_data(pvmm_pinned memory, void** data, size_t* size) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_register_host_memory(void* pointer, size_t size,
                                                 const pvmm_pinned_options* options) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_unregister_host_memory(void* pointer) PVMM_C_NOEXCEPT;

typedef enum pvmm_attach_mode { pvmm_attach_global = 0, pvmm_attach_host = 1, pvmm_attach_single = 2 } pvmm_attach_mode;
PVMM_C_API pvmm_status pvmm_managed_create(size_t size, int attach_mode, pvmm_managed* out) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_managed_release(pvmm_managed memory) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_managed_data(pvmm_managed memory, void** data, size_t* size) PVMM_C_NOEXCEPT;

/** Advice about a managed range (pvmm::advice, cuMemAdvise); the set_/unset_ pairs undo each other. */
typedef enum pvmm_advice {
  pvmm_advice_set_read_mostly = 0,
  pvmm_advice_unset_read_mostly = 1,
  pvmm_advice_set_preferred_location = 2,
  pvmm_advice_unset_preferred_location = 3,
  pvmm_advice_set_accessed_by = 4,
  pvmm_advice_unset_accessed_by = 5
} pvmm_advice;
/** `where` is NULL for the read-mostly advice and unset_preferred_location, a processor for the others. */
PVMM_C_API pvmm_status pvmm_managed_advise(const void* pointer, size_t size, int advice,
                                           const pvmm_location* where) PVMM_C_NOEXCEPT;

/* ---- streams and events (by native handle), stream-ordered pools ---------------------------------------------- */

/** A stream by its native handle (a CUstream / hipStream_t cast to an integer, nonzero: pvmm has no implicit
 * default stream), with the device it belongs to: the runtime's own streams are used as they are, never owned by
 * pvmm (pvmm::stream_ref). */
typedef struct pvmm_stream_ref {
  uint64_t native;
  int device;
} pvmm_stream_ref;

PVMM_C_API pvmm_status pvmm_stream_create(int device, pvmm_stream* out) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_stream_release(pvmm_stream stream) PVMM_C_NOEXCEPT;
/** The native handle of a stream pvmm created. */
PVMM_C_API pvmm_status pvmm_stream_native(pvmm_stream stream, pvmm_stream_ref* ref) PVMM_C_NOEXCEPT;
/* Every pvmm_stream_ref is borrowed: the caller's own stream (a cudaStream_t / hipStream_t it created) is passed
 * as it is and stays the caller's. {0, d} is pvmm_status_invalid_argument; on the host backend
 * only a handle from pvmm_stream_native is a stream (others: pvmm_status_invalid_handle). On a GPU a value that is
 * not a live stream of that device is the driver's undefined behaviour, as it is for the driver's own calls. */
PVMM_C_API pvmm_status pvmm_stream_synchronize(pvmm_stream_ref stream) PVMM_C_NOEXCEPT;
/** *done is 1 when all work enqueued so far has completed (unlike a synchronize, it makes no pool free reusable). */
PVMM_C_API pvmm_status pvmm_stream_query(pvmm_stream_ref stream, int* done) PVMM_C_NOEXCEPT;
/** Copies `size` bytes in the stream's order between host memory and memory its device can access (Open MPI's
 * mem_copy_async, libfabric's copy_to/from_hmem): pageable host memory pvmm did not make may be reused when the call
 * returns, pinned, registered and managed memory is read when the copy runs (pvmm::stream_ref::copy_async). */
PVMM_C_API pvmm_status pvmm_copy_async(void* destination, const void* source, size_t size,
                                       pvmm_stream_ref on) PVMM_C_NOEXCEPT;
/** Moves [pointer, pointer + size) of managed memory to `to` in the stream's order. */
PVMM_C_API pvmm_status pvmm_managed_prefetch_async(const void* pointer, size_t size, pvmm_location to,
                                                   pvmm_stream_ref on) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_event_create(int device, pvmm_event* out) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_event_release(pvmm_event event) PVMM_C_NOEXCEPT;
/** The native handle of an event pvmm created (a CUevent / hipEvent_t as an integer), for the runtime's own calls
 * (cudaStreamWaitEvent); it stays pvmm's: pvmm_event_release destroys it. */
PVMM_C_API pvmm_status pvmm_event_native(pvmm_event event, uint64_t* native) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_event_record(pvmm_event event, pvmm_stream_ref on) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_event_synchronize(pvmm_event event) PVMM_C_NOEXCEPT;
/** *done is 1 when the recorded work has completed (or nothing was recorded). */
PVMM_C_API pvmm_status pvmm_event_query(pvmm_event event, int* done) PVMM_C_NOEXCEPT;
/** The stream waits for the event's last recorded work. */
PVMM_C_API pvmm_status pvmm_stream_wait_event(pvmm_stream_ref stream, pvmm_event event) PVMM_C_NOEXCEPT;

typedef struct pvmm_pool_options {
  size_t struct_size;
  pvmm_location location;
  size_t max_size;     /**< 0: no limit */
  unsigned exportable; /**< pvmm_handle_* bits */
} pvmm_pool_options;

PVMM_C_API pvmm_status pvmm_pool_create(const pvmm_pool_options* options, pvmm_pool* out) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_pool_release(pvmm_pool pool) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_pool_allocate_async(pvmm_pool pool, size_t size, pvmm_stream_ref on,
                                                void** pointer) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_pool_free_async(pvmm_pool pool, void* pointer, pvmm_stream_ref on) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_pool_trim_to(pvmm_pool pool, size_t keep) PVMM_C_NOEXCEPT;
/** Bytes the pool holds from the driver and bytes allocated from it now. */
PVMM_C_API pvmm_status pvmm_pool_usage(pvmm_pool pool, uint64_t* reserved, uint64_t* used) PVMM_C_NOEXCEPT;
/** Reserved bytes above the release threshold go back at a synchronize (pvmm_pool_create sets UINT64_MAX, keeping
 * everything; 0 gives all unused memory back at every synchronize, the drivers' default). */
PVMM_C_API pvmm_status pvmm_pool_set_release_threshold(pvmm_pool pool, uint64_t bytes) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_pool_release_threshold(pvmm_pool pool, uint64_t* bytes) PVMM_C_NOEXCEPT;
/** Grants other devices access to the pool's memory (its own device always has read_write). */
PVMM_C_API pvmm_status pvmm_pool_set_access(pvmm_pool pool, const pvmm_access_descriptor* grants,
                                            size_t count) PVMM_C_NOEXCEPT;

/* Sharing a pool between processes (pvmm/memory_pool.hpp), as the C++ API does: the exporter creates the pool with
 * exportable = pvmm_handle_posix_fd (pvmm_device_info.pools_ipc_posix_fd), exports it once (an fd and its 16-byte
 * identity: send both, e.g. in one pvmm_connection_send), then each allocation, once the host has seen it complete
 * (a synchronize), as a pvmm_pool_pointer_export (plain bytes: send them as they are). The importer imports the pool
 * once and each pointer into it; an imported pool cannot allocate or be exported again and accepts only pointers
 * of the pool it came from. The importer frees before the exporter does (the caller's rule: nothing can see it
 * across processes). Importing one pointer twice in a process is pvmm_status_busy. */
typedef struct pvmm_pool_id {
  uint8_t bytes[16];
} pvmm_pool_id;
typedef struct pvmm_pool_pointer_export {
  uint8_t data[64];  /**< the driver's record */
  uint64_t size;     /**< the allocation's size in bytes */
  pvmm_pool_id pool; /**< the pool it belongs to */
} pvmm_pool_pointer_export;
/** A new fd (the caller's: close it once sent) and the identity an importer needs. */
PVMM_C_API pvmm_status pvmm_pool_export_posix_fd(pvmm_pool pool, int* fd, pvmm_pool_id* id) PVMM_C_NOEXCEPT;
/** The pool another process exported, for use on `device`; the fd stays the caller's (close it). */
PVMM_C_API pvmm_status pvmm_pool_import_posix_fd(int fd, const pvmm_pool_id* id, int device,
                                                 pvmm_pool* out) PVMM_C_NOEXCEPT;
/** The record of a live allocation of `pool` (pvmm_pool_allocate_async's pointer); export the pool first. */
PVMM_C_API pvmm_status pvmm_pool_export_pointer(pvmm_pool pool, const void* pointer,
                                                pvmm_pool_pointer_export* out) PVMM_C_NOEXCEPT;
/** An allocation exported from the pool `pool` was imported from, owned by the new handle: free it with
 * pvmm_pool_allocation_free_async (in a stream's order), or release it (freed on `free_on`, which must then still
 * exist). */
PVMM_C_API pvmm_status pvmm_pool_import_pointer(pvmm_pool pool, const pvmm_pool_pointer_export* from,
                                                pvmm_stream_ref free_on, pvmm_pool_allocation* out) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_pool_allocation_data(pvmm_pool_allocation allocation, void** data,
                                                 size_t* size) PVMM_C_NOEXCEPT;
/** Frees in `on`'s order; the handle dies on success and stays (the call may be retried) on failure. */
PVMM_C_API pvmm_status pvmm_pool_allocation_free_async(pvmm_pool_allocation allocation,
                                                       pvmm_stream_ref on) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_pool_allocation_release(pvmm_pool_allocation allocation) PVMM_C_NOEXCEPT;

/* ---- what is this address ------------------------------------------------------------------------------------- */

typedef enum pvmm_memory_kind {
  pvmm_memory_none = 0,
  pvmm_memory_device = 1,
  pvmm_memory_pool = 2,
  pvmm_memory_managed = 3,
  pvmm_memory_pinned = 4,
  pvmm_memory_registered = 5
} pvmm_memory_kind;

typedef struct pvmm_pointer_attributes {
  size_t struct_size;
  int kind; /**< pvmm_memory_kind */
  void* base;
  size_t size;
  int device; /**< -1 for host memory and where nothing is mapped */
  int device_accessible_from_host;
  int mapped;
} pvmm_pointer_attributes;

/** What UCX's detect_memory_type and Open MPI's check_addr ask. Memory pvmm did not make is pvmm_memory_none. */
PVMM_C_API pvmm_status pvmm_query_pointer(const void* pointer, pvmm_pointer_attributes* attributes) PVMM_C_NOEXCEPT;

/* ---- bootstrap: how the ranks of a team find each other ------------------------------------------------------- */

/** Deadlines are CLOCK_MONOTONIC nanoseconds (INT64_MAX: never). */
PVMM_C_API int64_t pvmm_monotonic_ns(void) PVMM_C_NOEXCEPT;

#define PVMM_BOOTSTRAP_OPS_VERSION 1

/** A bootstrap written in C: pvmm calls these through the C++ bootstrap's contract (arguments checked, collectives
 * numbered, the broken state kept), so a C bootstrap gets the same checks as the built-in ones. Every callback
 * returns pvmm_status_ok or a pvmm_status; it may call pvmm_bootstrap_fail_detail first to say why. `collective`
 * numbers the collectives 0, 1, ... in step on every rank. Callbacks are never called while pvmm holds a lock. */
typedef struct pvmm_bootstrap_ops {
  uint32_t version;     /**< PVMM_BOOTSTRAP_OPS_VERSION */
  uint32_t struct_size; /**< sizeof(pvmm_bootstrap_ops) */
  void* context;        /**< passed to every callback */
  int rank, size, node, local_rank, local_size;
  const char* adapter; /**< name in errors; NULL: "c" */
  /** Required: every rank's `bytes` at `mine` into `all` (size * bytes) in rank order. */
  int (*allgather)(void* context, const void* mine, size_t bytes, void* all, uint64_t collective, int64_t deadline_ns);
  /** Optional (NULL: an allgather of one byte). */
  int (*barrier)(void* context, uint64_t collective, int64_t deadline_ns);
  /** Optional (NULL: not_supported). */
  int (*send)(void* context, int peer, int tag, const void* data, size_t bytes, int64_t deadline_ns);
  int (*receive)(void* context, int peer, int tag, void* data, size_t bytes, int64_t deadline_ns);
  /** Required: tell the peers this rank gave up and wake this rank's waits (any thread). */
  void (*abort)(void* context);
  /** Optional: called once when the last reference to the bootstrap goes (the team may hold one). */
  void (*destroy)(void* context);
} pvmm_bootstrap_ops;

/** Adopts `ops` (copied; `context` must live until destroy). */
PVMM_C_API pvmm_status pvmm_bootstrap_create(const pvmm_bootstrap_ops* ops, pvmm_bootstrap* out) PVMM_C_NOEXCEPT;
/** `size` bootstraps whose ranks are threads of this process: out[r] goes to the thread of rank r. */
PVMM_C_API pvmm_status pvmm_bootstrap_create_threads(int size, pvmm_bootstrap* out) PVMM_C_NOEXCEPT;
/** Node-local processes meeting at endpoint `name` (pvmm::make_endpoint_bootstrap). */
PVMM_C_API pvmm_status pvmm_bootstrap_create_endpoints(const char* name, int rank, int size, int64_t timeout_ms,
                                                       pvmm_bootstrap* out) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_bootstrap_release(pvmm_bootstrap bootstrap) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_bootstrap_rank(pvmm_bootstrap bootstrap, int* rank, int* size) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_bootstrap_allgather(pvmm_bootstrap bootstrap, const void* mine, size_t bytes, void* all,
                                                int64_t deadline_ns) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_bootstrap_barrier(pvmm_bootstrap bootstrap, int64_t deadline_ns) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_bootstrap_send(pvmm_bootstrap bootstrap, int peer, int tag, const void* data, size_t bytes,
                                           int64_t deadline_ns) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_bootstrap_receive(pvmm_bootstrap bootstrap, int peer, int tag, void* data, size_t bytes,
                                              int64_t deadline_ns) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_bootstrap_abort(pvmm_bootstrap bootstrap) PVMM_C_NOEXCEPT;
/** For a C bootstrap's callback: the detail of the failure it is about to return (this thread; copied). */
PVMM_C_API void pvmm_bootstrap_fail_detail(const char* detail) PVMM_C_NOEXCEPT;

/* ---- teams and symmetric windows ------------------------------------------------------------------------------- */

typedef struct pvmm_team_options {
  size_t struct_size;
  int device;
  int64_t timeout_ms; /**< 0: 30000 */
} pvmm_team_options;

/** Collective. The team keeps its own reference to the bootstrap (release yours when you like). */
PVMM_C_API pvmm_status pvmm_team_create(pvmm_bootstrap ranks, const pvmm_team_options* options,
                                        pvmm_team* out) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_team_release(pvmm_team team) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_team_abort(pvmm_team team) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_team_info(pvmm_team team, int* rank, int* size, int* device,
                                      int* node_count) PVMM_C_NOEXCEPT;

typedef struct pvmm_window_options {
  size_t struct_size;
  size_t size;
  size_t max_size;     /**< 0: the largest size any rank asks for */
  int64_t timeout_ms;  /**< 0: 30000 */
  int signal_channels; /**< > 0: signal pads of that many channels per peer (the same on every rank) */
} pvmm_window_options;

PVMM_C_API pvmm_status pvmm_window_create(pvmm_team team, const pvmm_window_options* options,
                                          pvmm_window* out) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_window_release(pvmm_window window) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_window_grow(pvmm_window window, size_t new_size, int64_t timeout_ms) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_window_base(pvmm_window window, void** base, size_t* stride) PVMM_C_NOEXCEPT;
/** Where rank `rank`'s memory is mapped here; pvmm_status_not_mapped (with the reason) when it is not. */
PVMM_C_API pvmm_status pvmm_window_peer(pvmm_window window, int rank, void** address, size_t* size) PVMM_C_NOEXCEPT;

/* Signals (a window made with signal_channels > 0; pvmm/team.hpp): stream-ordered, every wait bounded. A wait that
 * expires lets the stream go on; pvmm_window_signal_status then answers pvmm_status_timeout naming the rank and
 * channel. Kernels use pvmm/team_device.hpp (C++) with the table from pvmm_window_device_pointer_table. On the
 * GPU backends, wait_signal and barrier answer pvmm_status_not_supported where another rank of the window is in
 * this process on this device (thread ranks on one GPU): one context's kernels are not sure to run at once. */
PVMM_C_API pvmm_status pvmm_window_put_signal(pvmm_window window, int peer, int channel,
                                              pvmm_stream_ref on) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_window_wait_signal(pvmm_window window, int peer, int channel, pvmm_stream_ref on,
                                               int64_t timeout_ms) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_window_barrier(pvmm_window window, pvmm_stream_ref on, int64_t timeout_ms,
                                           int channel) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_window_signal_status(pvmm_window window) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_window_device_pointer_table(pvmm_window window, void* const** table) PVMM_C_NOEXCEPT;

#ifdef __cplusplus
} /* extern "C" */
#endif

#include <pvmm/c/snapshot.h> /* memory snapshots (PyTorch's visualizer format) */

#endif /* PVMM_PVMM_H */
