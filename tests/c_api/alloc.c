/* The allocators' C face (pvmm/c/alloc.h): the caching allocator, the growable arena and the sleeping allocator
 * through their handles; bytes written one way and read back another; exact statuses for misuse. */
#include <stdint.h>
#include <string.h>

#include "check.h"

#define MIB ((size_t)1 << 20)

static void fill(void* p, size_t n, unsigned seed) {
  unsigned char* bytes = (unsigned char*)malloc(n);
  for (size_t i = 0; i < n; ++i) bytes[i] = (unsigned char)(i * 131 + seed);
  CHECK_OK(pvmm_copy_to_mapping(p, bytes, n, -1));
  free(bytes);
}
static int holds(const void* p, size_t n, unsigned seed) {
  unsigned char* bytes = (unsigned char*)malloc(n);
  int ok = pvmm_copy_from_mapping(bytes, p, n, -1) == pvmm_status_ok;
  for (size_t i = 0; ok && i < n; ++i) ok = bytes[i] == (unsigned char)(i * 131 + seed);
  free(bytes);
  return ok;
}

static void caching(pvmm_stream_ref on) {
  pvmm_caching c = {0};
  pvmm_caching_options o = PVMM_INIT(pvmm_caching_options);
  CHECK(o.wait_for_pending_frees == 1 && o.slack_percent == 8);
  CHECK_OK(pvmm_caching_create(&o, &c));
  void* p = NULL;
  CHECK_OK(pvmm_caching_allocate(c, 3 * MIB, on, &p));
  fill(p, 3 * MIB, 1);
  CHECK(holds(p, 3 * MIB, 1));
  pvmm_caching_stats st = PVMM_INIT(pvmm_caching_stats);
  CHECK_OK(pvmm_caching_stats_get(c, &st));
  CHECK(st.live == 3 * MIB && st.live_blocks == 1 && st.reserved >= 3 * MIB);
  CHECK_STATUS(pvmm_caching_release(c), pvmm_status_busy, "still allocated");
  CHECK_OK(pvmm_caching_deallocate(c, p, on));
  CHECK_STATUS(pvmm_caching_deallocate(c, p, on), pvmm_status_invalid_argument, "already given back");
  CHECK_STATUS(pvmm_caching_allocate(c, 0, on, &p), pvmm_status_invalid_size, "size is 0");
  CHECK_STATUS(pvmm_caching_allocate(c, 1, on, NULL), pvmm_status_invalid_argument, "out");
  size_t small = offsetof(pvmm_caching_stats, live); /* an "older" caller: a prefix is written, nothing after */
  st.live = 12345;
  st.struct_size = small - 1;
  CHECK_STATUS(pvmm_caching_stats_get(c, &st), pvmm_status_version_mismatch, "struct_size");
  CHECK_OK(pvmm_caching_trim(c));
  CHECK_OK(pvmm_caching_reset_peaks(c));
  CHECK_OK(pvmm_caching_release(c));
  CHECK_STATUS(pvmm_caching_release(c), pvmm_status_already_released, "released");
  CHECK_STATUS(pvmm_caching_trim(c), pvmm_status_already_released, "released");
}

/* pvmm_caching_options as first published: a caller compiled before grow_in_place was appended. */
typedef struct old_caching_options {
  size_t struct_size;
  int device;
  size_t chunk_size, max_reserved;
  int wait_for_pending_frees;
  unsigned slack_percent;
  size_t max_ghost_bytes;
} old_caching_options;

/* Chunks the second allocation maps: 4 MiB freed at the end of its region, then 8 MiB asked for (grown in place: 1
 * chunk; stitched: 2). */
static uint64_t maps_for_8_after_4(const pvmm_caching_options* o, pvmm_stream_ref on) {
  pvmm_caching c = {0};
  void *p = NULL, *q = NULL;
  pvmm_caching_stats before = PVMM_INIT(pvmm_caching_stats), after = PVMM_INIT(pvmm_caching_stats);
  CHECK_OK(pvmm_caching_create(o, &c));
  CHECK_OK(pvmm_caching_allocate(c, 4 * MIB, on, &p));
  CHECK_OK(pvmm_caching_deallocate(c, p, on));
  CHECK_OK(pvmm_caching_stats_get(c, &before));
  CHECK_OK(pvmm_caching_allocate(c, 8 * MIB, on, &q));
  CHECK_OK(pvmm_caching_stats_get(c, &after));
  CHECK_OK(pvmm_caching_deallocate(c, q, on));
  CHECK_OK(pvmm_caching_release(c));
  return after.maps - before.maps;
}

static void caching_growth(pvmm_stream_ref on) {
  pvmm_caching_options o = PVMM_INIT(pvmm_caching_options);
  CHECK(o.grow_in_place == 1);
  o.chunk_size = 4 * MIB;
  CHECK(maps_for_8_after_4(&o, on) == 1);
  o.grow_in_place = 0;
  CHECK(maps_for_8_after_4(&o, on) == 2);
  old_caching_options old = {sizeof(old_caching_options), 0, 4 * MIB, 0, 1, 8, 0};
  CHECK(maps_for_8_after_4((const pvmm_caching_options*)(const void*)&old, on) == 1); /* read as grow_in_place 1 */
  o.struct_size = sizeof(old_caching_options) - 8;                                    /* shorter than ever published */
  pvmm_caching c = {0};
  CHECK_STATUS(pvmm_caching_create(&o, &c), pvmm_status_version_mismatch, "pvmm_caching_options");
}

static void arena(void) {
  pvmm_arena a = {0};
  pvmm_arena_options o = PVMM_INIT(pvmm_arena_options);
  o.reserve_size = 16 * MIB;
  o.chunk_size = 2 * MIB;
  CHECK_OK(pvmm_arena_create(&o, &a));
  void *x = NULL, *y = NULL;
  CHECK_OK(pvmm_arena_allocate(a, 1000, &x));
  CHECK_OK(pvmm_arena_allocate(a, 3 * MIB, &y));
  CHECK((char*)y == (char*)x + 1024);
  fill(y, 3 * MIB, 2);
  CHECK(holds(y, 3 * MIB, 2));
  pvmm_arena_stats st = PVMM_INIT(pvmm_arena_stats);
  CHECK_OK(pvmm_arena_stats_get(a, &st));
  CHECK(st.allocations == 2 && st.mapped_bytes == 4 * MIB && st.reserved_bytes == 16 * MIB);
  CHECK_STATUS(pvmm_arena_allocate(a, 17 * MIB, &x), pvmm_status_out_of_memory, "reservation");
  CHECK_STATUS(pvmm_arena_release(a), pvmm_status_busy, "still live");
  CHECK_OK(pvmm_arena_deallocate(a, y));
  CHECK_OK(pvmm_arena_deallocate(a, x));
  CHECK_OK(pvmm_arena_stats_get(a, &st));
  CHECK(st.allocations == 0 && st.mapped_bytes == 0 && st.shrinks == 2);
  pvmm_caching wrong = {a.id}; /* another kind's handle */
  CHECK_STATUS(pvmm_caching_trim(wrong), pvmm_status_invalid_handle, "");
  CHECK_OK(pvmm_arena_release(a));
  CHECK_STATUS(pvmm_arena_allocate(a, 1, &x), pvmm_status_already_released, "released");
}

static int changes = 0;
static uint64_t last_old = 0, last_new = 0;
static void on_change(const pvmm_backing_change* c, void* user) {
  ++changes;
  last_old = c->old_generation;
  last_new = c->new_generation;
  CHECK(user == (void*)&changes);
  CHECK(strcmp(c->tag, "weights") == 0 || strcmp(c->tag, "default") == 0);
}

static void sleeping(pvmm_stream_ref on) {
  pvmm_sleeping s = {0};
  pvmm_sleeping_options o = PVMM_INIT(pvmm_sleeping_options);
  CHECK(o.copy_streams == 2 && o.staging_slots == 4 && o.release_address_range == -1);
  o.staging_slot_bytes = 64 << 10;
  CHECK_OK(pvmm_sleeping_create(&o, &s));
  pvmm_tag_policy policy = PVMM_INIT(pvmm_tag_policy);
  CHECK(policy.policy == pvmm_sleep_offload_pinned);
  policy.policy = pvmm_sleep_offload_pageable;
  CHECK_OK(pvmm_sleeping_set_policy(s, "weights", &policy));
  uint64_t id = 0;
  CHECK_OK(pvmm_sleeping_add_backing_callback(s, on_change, &changes, &id));
  char previous[32];
  CHECK_OK(pvmm_sleeping_set_tag(s, "weights", previous, sizeof previous));
  CHECK(strcmp(previous, "default") == 0);
  void *w = NULL, *d = NULL;
  CHECK_OK(pvmm_sleeping_allocate(s, 2 * MIB, NULL, &w)); /* the current tag */
  CHECK_OK(pvmm_sleeping_allocate(s, MIB, "default", &d));
  fill(w, 2 * MIB, 3);
  char tag[16];
  CHECK_OK(pvmm_sleeping_tag_of(s, (char*)w + 5, tag, sizeof tag));
  CHECK(strcmp(tag, "weights") == 0);
  CHECK_STATUS(pvmm_sleeping_tag_of(s, w, tag, 3), pvmm_status_out_of_range, "needs 8 bytes");
  uint64_t g0 = 0, g1 = 0;
  CHECK_OK(pvmm_sleeping_generation(s, w, &g0));
  const char* tags[] = {"weights"};
  CHECK_OK(pvmm_sleeping_sleep(s, tags, 1));
  CHECK_OK(pvmm_sleeping_generation(s, w, &g1));
  CHECK(g1 != g0 && changes == 1 && last_old == g0 && last_new == g1);
  pvmm_sleeping_stats st = PVMM_INIT(pvmm_sleeping_stats);
  CHECK_OK(pvmm_sleeping_stats_get(s, "weights", &st));
  CHECK(st.asleep == 1 && st.resident_bytes == 0 && st.offloaded_bytes == 2 * MIB && st.staging_bytes > 0);
  unsigned char copy[64];
  CHECK_OK(pvmm_sleeping_read_host_copy(s, w, MIB, copy, sizeof copy));
  CHECK(copy[0] == (unsigned char)(MIB * 131 + 3) && copy[63] == (unsigned char)((MIB + 63) * 131 + 3));
  pvmm_event done = {0};
  CHECK_OK(pvmm_sleeping_wake_async(s, NULL, 0, on, &done));
  CHECK_OK(pvmm_event_synchronize(done));
  CHECK_OK(pvmm_event_release(done));
  CHECK(holds(w, 2 * MIB, 3));
  CHECK_OK(pvmm_sleeping_sleep_async(s, NULL, 0, on, NULL));
  CHECK_OK(pvmm_sleeping_wake(s, NULL, 0));
  CHECK(holds(w, 2 * MIB, 3));
  const char* others[] = {"default"}; /* pinned: page-locked ahead; "weights" is pageable */
  CHECK_OK(pvmm_sleeping_prepare_host_memory(s, others, 1));
  pvmm_sleeping_stats of_default = PVMM_INIT(pvmm_sleeping_stats);
  CHECK_OK(pvmm_sleeping_stats_get(s, "default", &of_default));
  CHECK_OK(pvmm_sleeping_stats_get(s, NULL, &st));
  CHECK(st.kept_host_bytes == of_default.reserved_bytes && of_default.reserved_bytes >= MIB);
  CHECK_OK(pvmm_sleeping_trim_host_memory(s));
  CHECK_OK(pvmm_sleeping_stats_get(s, NULL, &st));
  CHECK(st.kept_host_bytes == 0);
  CHECK_OK(pvmm_sleeping_remove_backing_callback(s, id));
  CHECK_STATUS(pvmm_sleeping_remove_backing_callback(s, id), pvmm_status_invalid_argument, "no backing callback");
  const char* bad[] = {"weights", NULL};
  CHECK_STATUS(pvmm_sleeping_sleep(s, bad, 2), pvmm_status_invalid_argument, "tags[1] is NULL");
  CHECK_STATUS(pvmm_sleeping_sleep(s, NULL, 1), pvmm_status_invalid_argument, "tags is NULL");
  CHECK_STATUS(pvmm_sleeping_prepare_host_memory(s, bad, 2), pvmm_status_invalid_argument, "tags[1] is NULL");
  CHECK_STATUS(pvmm_sleeping_prepare_host_memory(s, NULL, 1), pvmm_status_invalid_argument, "tags is NULL");
  CHECK_STATUS(pvmm_sleeping_allocate(s, SIZE_MAX, "t", &w), pvmm_status_out_of_memory, "granularity");
  CHECK_OK(pvmm_sleeping_deallocate(s, d));
  CHECK_OK(pvmm_sleeping_release(s)); /* frees what is left */
  CHECK_STATUS(pvmm_sleeping_wake(s, NULL, 0), pvmm_status_already_released, "released");
  CHECK_STATUS(pvmm_sleeping_prepare_host_memory(s, NULL, 0), pvmm_status_already_released, "released");
}

int main(void) {
  int devices = 0;
  if (pvmm_device_count(&devices) != pvmm_status_ok || devices == 0) {
    printf("[pvmm-skip] no device\n");
    return 0;
  }
  pvmm_stream stream = {0};
  pvmm_stream_ref on;
  CHECK_OK(pvmm_stream_create(0, &stream));
  CHECK_OK(pvmm_stream_native(stream, &on));
  caching(on);
  caching_growth(on);
  arena();
  sleeping(on);
  CHECK_OK(pvmm_stream_release(stream));
  return check_summary("c_api/alloc");
}
