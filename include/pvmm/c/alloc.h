/* pvmm/c/alloc.h - the allocators (part of pvmm/pvmm.h, C11; include <pvmm/pvmm.h> for everything): the caching
 * allocator (pvmm/caching_allocator.hpp), the growable arena (growable_arena.hpp) and the sleeping allocator
 * (sleeping_allocator.hpp). Each handle is one C++ owner; the semantics are the C++ headers'. */
#ifndef PVMM_C_ALLOC_H
#define PVMM_C_ALLOC_H

#include <pvmm/c/streams.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the caching allocator --------------------------------------------------------------------------------------- */

typedef struct pvmm_caching_options {
  size_t struct_size;
  int device;
  size_t chunk_size;          /**< 0: the device's recommended granularity, at least 4 MiB */
  size_t max_reserved;        /**< 0: no limit beyond the device's */
  int wait_for_pending_frees; /**< PVMM_INIT: 1 */
  unsigned slack_percent;     /**< PVMM_INIT: 8 */
  size_t max_ghost_bytes;     /**< 0: max(4 x reserved, 16 GiB) */
  int grow_in_place;          /**< PVMM_INIT: 1; 0: every miss stitches a new region (appended: struct_size may end
                                   before it, read as 1) */
} pvmm_caching_options;
#define PVMM_C_DEFAULTS_pvmm_caching_options(F) F(wait_for_pending_frees, 1) F(slack_percent, 8) F(grow_in_place, 1)

/** What a caching allocator holds and has done (pvmm::caching_stats; written as far as struct_size holds). */
typedef struct pvmm_caching_stats {
  size_t struct_size;
  uint64_t reserved, live, peak_reserved, peak_live, live_blocks, cached_blocks, cache_hits, stitches, chunks_reused,
      waits, pressure_retries, chunks_created, maps, unmaps, event_records, event_queries, device_waits, host_syncs,
      ghost_bytes, stitch_ns, unmap_ns, create_ns, event_record_ns, event_query_ns, device_wait_ns;
} pvmm_caching_stats;
#define PVMM_C_DEFAULTS_pvmm_caching_stats(F)

/** `options` may be NULL (PVMM_INIT(pvmm_caching_options)'s defaults). */
PVMM_C_API pvmm_status pvmm_caching_create(const pvmm_caching_options* options, pvmm_caching* out) PVMM_C_NOEXCEPT;
/** pvmm_status_busy while blocks are allocated (the handle stays valid). */
PVMM_C_API pvmm_status pvmm_caching_release(pvmm_caching allocator) PVMM_C_NOEXCEPT;
/** `size` bytes usable in `on`'s order, aligned to 512 bytes. */
PVMM_C_API pvmm_status pvmm_caching_allocate(pvmm_caching allocator, size_t size, pvmm_stream_ref on,
                                             void** out) PVMM_C_NOEXCEPT;
/** Gives a block back in `on`'s order (the stream of its last use). */
PVMM_C_API pvmm_status pvmm_caching_deallocate(pvmm_caching allocator, void* pointer,
                                               pvmm_stream_ref on) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_caching_trim(pvmm_caching allocator) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_caching_stats_get(pvmm_caching allocator, pvmm_caching_stats* out) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_caching_reset_peaks(pvmm_caching allocator) PVMM_C_NOEXCEPT;

/* ---- the growable arena ------------------------------------------------------------------------------------------ */

typedef struct pvmm_arena_options {
  size_t struct_size;
  int device;
  size_t reserve_size; /**< 0: the device's total memory */
  size_t chunk_size;   /**< 0: 64 MiB */
} pvmm_arena_options;
#define PVMM_C_DEFAULTS_pvmm_arena_options(F)

typedef struct pvmm_arena_stats {
  size_t struct_size;
  size_t allocations, allocated_bytes, mapped_bytes, peak_mapped_bytes, reserved_bytes, grows, shrinks;
} pvmm_arena_stats;
#define PVMM_C_DEFAULTS_pvmm_arena_stats(F)

/** `options` may be NULL (PVMM_INIT(pvmm_arena_options)'s defaults). */
PVMM_C_API pvmm_status pvmm_arena_create(const pvmm_arena_options* options, pvmm_arena* out) PVMM_C_NOEXCEPT;
/** pvmm_status_busy while allocations are live (the handle stays valid). */
PVMM_C_API pvmm_status pvmm_arena_release(pvmm_arena arena) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_arena_allocate(pvmm_arena arena, size_t size, void** out) PVMM_C_NOEXCEPT;
/** No device work in flight may use the allocation any more. */
PVMM_C_API pvmm_status pvmm_arena_deallocate(pvmm_arena arena, void* pointer) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_arena_stats_get(pvmm_arena arena, pvmm_arena_stats* out) PVMM_C_NOEXCEPT;

/* ---- the sleeping allocator -------------------------------------------------------------------------------------- */

typedef struct pvmm_sleeping_options {
  size_t struct_size;
  int device;
  unsigned copy_streams;     /**< PVMM_INIT: 2 */
  unsigned staging_slots;    /**< PVMM_INIT: 4 */
  size_t staging_slot_bytes; /**< PVMM_INIT: 32 MiB */
  int release_address_range; /**< 1 on, 0 off; PVMM_INIT: -1 (on for the hip backend, off elsewhere) */
  int keep_host_memory;      /**< PVMM_INIT: 0 (pvmm::sleeping_options::keep_host_memory) */
} pvmm_sleeping_options;
#define PVMM_C_DEFAULTS_pvmm_sleeping_options(F) \
  F(copy_streams, 2) F(staging_slots, 4) F(staging_slot_bytes, (size_t)32 << 20) F(release_address_range, -1)

typedef enum pvmm_sleep_policy {
  pvmm_sleep_discard = 0,
  pvmm_sleep_offload_pinned = 1,
  pvmm_sleep_offload_pageable = 2,
  pvmm_sleep_offload_file = 3
} pvmm_sleep_policy;

typedef struct pvmm_tag_policy {
  size_t struct_size;
  int policy;                 /**< a pvmm_sleep_policy; PVMM_INIT: pvmm_sleep_offload_pinned */
  int retain_host_copy;       /**< PVMM_INIT: 0 */
  const char* file_directory; /**< offload_file; NULL or "": $TMPDIR, else /tmp */
} pvmm_tag_policy;
#define PVMM_C_DEFAULTS_pvmm_tag_policy(F) F(policy, 1)

typedef struct pvmm_sleeping_stats {
  size_t struct_size;
  size_t allocations, reserved_bytes, resident_bytes, offloaded_bytes, asleep, staging_bytes, kept_host_bytes;
} pvmm_sleeping_stats;
#define PVMM_C_DEFAULTS_pvmm_sleeping_stats(F)

typedef enum pvmm_backing_event {
  pvmm_backing_sleep = 0,
  pvmm_backing_wake = 1,
  pvmm_backing_free = 2
} pvmm_backing_event;
/** What a backing callback is told (valid during the call). */
typedef struct pvmm_backing_change {
  void* address;
  size_t size;
  uint64_t old_generation;
  uint64_t new_generation; /**< 0 for free */
  int reason;              /**< a pvmm_backing_event */
  const char* tag;
} pvmm_backing_change;
/** Runs on the thread that slept, woke or freed, under no lock of pvmm's, before the old backing goes (before the new
 * one is mapped, for wake). It may call the allocator (a sleep or wake it starts answers pvmm_status_busy). */
typedef void (*pvmm_backing_callback)(const pvmm_backing_change* change, void* user_data);

/** `options` may be NULL (PVMM_INIT(pvmm_sleeping_options)'s defaults). */
PVMM_C_API pvmm_status pvmm_sleeping_create(const pvmm_sleeping_options* options, pvmm_sleeping* out) PVMM_C_NOEXCEPT;
/** Frees everything, allocations included; pvmm_status_busy while a sleep or wake runs. */
PVMM_C_API pvmm_status pvmm_sleeping_release(pvmm_sleeping allocator) PVMM_C_NOEXCEPT;
/** `tag` NULL: the current tag (pvmm_sleeping_set_tag). */
PVMM_C_API pvmm_status pvmm_sleeping_allocate(pvmm_sleeping allocator, size_t size, const char* tag,
                                              void** out) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_sleeping_deallocate(pvmm_sleeping allocator, void* pointer) PVMM_C_NOEXCEPT;
/** `policy` may be NULL (PVMM_INIT(pvmm_tag_policy)'s defaults). */
PVMM_C_API pvmm_status pvmm_sleeping_set_policy(pvmm_sleeping allocator, const char* tag,
                                                const pvmm_tag_policy* policy) PVMM_C_NOEXCEPT;
/** Sets the current tag; `previous` (may be NULL) gets the one replaced, truncated to `capacity` bytes. */
PVMM_C_API pvmm_status pvmm_sleeping_set_tag(pvmm_sleeping allocator, const char* tag, char* previous,
                                             size_t capacity) PVMM_C_NOEXCEPT;
/** `tags` names `tag_count` tags; 0 tags: every allocation. Blocks until done. */
PVMM_C_API pvmm_status pvmm_sleeping_sleep(pvmm_sleeping allocator, const char* const* tags,
                                           size_t tag_count) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_sleeping_wake(pvmm_sleeping allocator, const char* const* tags,
                                          size_t tag_count) PVMM_C_NOEXCEPT;
/** The asynchronous forms: ordered after the work queued on `on`; `done` (may be NULL) gets an event marking the end
 * on `on` (pvmm_event_release it). The sleep returns once the memory is given back; the wake once its copies are
 * queued (`on` waits for them on the device). */
PVMM_C_API pvmm_status pvmm_sleeping_sleep_async(pvmm_sleeping allocator, const char* const* tags, size_t tag_count,
                                                 pvmm_stream_ref on, pvmm_event* done) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_sleeping_wake_async(pvmm_sleeping allocator, const char* const* tags, size_t tag_count,
                                                pvmm_stream_ref on, pvmm_event* done) PVMM_C_NOEXCEPT;
/** `size` bytes at `offset` of the host copy of the allocation holding `pointer` (asleep, or retained). */
PVMM_C_API pvmm_status pvmm_sleeping_read_host_copy(pvmm_sleeping allocator, const void* pointer, size_t offset,
                                                    void* out, size_t size) PVMM_C_NOEXCEPT;
/** The tag of the allocation holding `pointer`, terminated; pvmm_status_out_of_range when `capacity` is short. */
PVMM_C_API pvmm_status pvmm_sleeping_tag_of(pvmm_sleeping allocator, const void* pointer, char* tag,
                                            size_t capacity) PVMM_C_NOEXCEPT;
/** The backing generation of the allocation holding `pointer` (it changes whenever its physical memory does). */
PVMM_C_API pvmm_status pvmm_sleeping_generation(pvmm_sleeping allocator, const void* pointer,
                                                uint64_t* out) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_sleeping_add_backing_callback(pvmm_sleeping allocator, pvmm_backing_callback callback,
                                                          void* user_data, uint64_t* id) PVMM_C_NOEXCEPT;
PVMM_C_API pvmm_status pvmm_sleeping_remove_backing_callback(pvmm_sleeping allocator, uint64_t id) PVMM_C_NOEXCEPT;
/** Page-locks now what the next sleep of `tags` (`tag_count`; 0: every tag) copies into for its pinned-policy tags,
 * so that sleep runs at the speed of the bus; held for those tags until their sleep takes it (a failed sleep puts
 * it back) or trim frees it. pvmm_status_out_of_memory naming the tag, nothing made, when host memory is short. */
PVMM_C_API pvmm_status pvmm_sleeping_prepare_host_memory(pvmm_sleeping allocator, const char* const* tags,
                                                         size_t tag_count) PVMM_C_NOEXCEPT;
/** Frees the page-locked memory kept for reuse (keep_host_memory, prepare_host_memory). */
PVMM_C_API pvmm_status pvmm_sleeping_trim_host_memory(pvmm_sleeping allocator) PVMM_C_NOEXCEPT;
/** `tag` NULL: every allocation. */
PVMM_C_API pvmm_status pvmm_sleeping_stats_get(pvmm_sleeping allocator, const char* tag,
                                               pvmm_sleeping_stats* out) PVMM_C_NOEXCEPT;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PVMM_C_ALLOC_H */
