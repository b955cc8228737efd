/* pvmm/c/streams.h - streams and events by native handle, stream-ordered pools and their sharing (part of pvmm/pvmm.h,
 * C11; include <pvmm/pvmm.h> for everything). */
#ifndef PVMM_C_STREAMS_H
#define PVMM_C_STREAMS_H

#include <pvmm/c/devices.h>

#ifdef __cplusplus
extern "C" {
#endif

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
#define PVMM_C_DEFAULTS_pvmm_pool_options(F)

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

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PVMM_C_STREAMS_H */
