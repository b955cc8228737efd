/* pvmm's C interface doing real work on the configured backend: data written through one mapping read back through
 * an import of the same memory, the pointer query, a growable buffer, pinned and managed memory, a team of threads
 * over a bootstrap written in C (thread_bootstrap.h) with a symmetric window, and a C bootstrap whose callback
 * fails. No fd is leaked. Plain C11. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <unistd.h>

#include "check.h"
#include "thread_bootstrap.h"

static int open_fds(void) {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  if (d == NULL) return -1;
  while (readdir(d) != NULL) ++n;
  closedir(d);
  return n;
}

static void memory_round_trip(void) {
  pvmm_allocation_properties props = PVMM_INIT(pvmm_allocation_properties);
  pvmm_access_descriptor rw = {{pvmm_location_device, 0}, pvmm_access_read_write};
  pvmm_pointer_attributes attrs = PVMM_INIT(pvmm_pointer_attributes);
  pvmm_allocation alloc, imported, retained;
  pvmm_reservation first, second;
  size_t gran = 0, size = 0;
  unsigned char *a = NULL, *b = NULL;
  int fd = -1, access = -1, value = 0;

  props.exportable = pvmm_handle_posix_fd;
  CHECK_OK(pvmm_reservation_granularity(&gran));
  CHECK_OK(pvmm_allocation_create(gran, &props, &alloc));
  CHECK_OK(pvmm_allocation_size(alloc, &size));
  CHECK(size == gran);
  CHECK_OK(pvmm_reservation_create(gran, 0, NULL, &first));
  CHECK_OK(pvmm_reservation_map(first, 0, alloc, 0, gran, (void**)&a));
  CHECK_OK(pvmm_reservation_set_access(first, 0, gran, &rw, 1));
  CHECK_OK(pvmm_query_access(rw.location, a, &access));
  CHECK(access == pvmm_access_read_write);
  {
    unsigned char* fill = (unsigned char*)malloc(gran);
    CHECK(fill != NULL);
    if (fill != NULL) memset(fill, 0x5a, gran);
    CHECK_OK(pvmm_copy_to_mapping(a, fill, gran, -1));
    free(fill);
  }

  CHECK_OK(pvmm_query_pointer(a + 100, &attrs));
  CHECK(attrs.kind == pvmm_memory_device && attrs.base == a && attrs.size == gran && attrs.mapped == 1);
  CHECK_OK(pvmm_query_pointer(&value, &attrs));
  CHECK(attrs.kind == pvmm_memory_none && attrs.base == NULL && attrs.device == -1);

  /* export, import, map the import elsewhere: the bytes written through `a` read back through `b` */
  CHECK_OK(pvmm_allocation_export_posix_fd(alloc, &fd));
  CHECK(fd >= 0);
  CHECK_OK(pvmm_allocation_import_posix_fd(fd, gran, &imported));
  close(fd);
  CHECK_OK(pvmm_reservation_create(gran, 0, NULL, &second));
  CHECK_OK(pvmm_reservation_map(second, 0, imported, 0, gran, (void**)&b));
  CHECK_OK(pvmm_reservation_set_access(second, 0, gran, &rw, 1));
  {
    unsigned char first_byte = 0, last_byte = 0, mark = 0x11, seen = 0;
    CHECK_OK(pvmm_copy_from_mapping(&first_byte, b, 1, -1));
    CHECK_OK(pvmm_copy_from_mapping(&last_byte, b + gran - 1, 1, -1));
    CHECK(b != a && first_byte == 0x5a && last_byte == 0x5a);
    CHECK_OK(pvmm_copy_to_mapping(b + 7, &mark, 1, -1));
    CHECK_OK(pvmm_copy_from_mapping(&seen, a + 7, 1, -1));
    CHECK(seen == 0x11);
  }
  CHECK_OK(pvmm_allocation_retain(b + 8, &retained));
  CHECK_OK(pvmm_allocation_size(retained, &size));
  CHECK(size == gran);

  CHECK_OK(pvmm_reservation_unmap(second, 0, gran));
  CHECK_OK(pvmm_reservation_release(second));
  CHECK_OK(pvmm_allocation_release(retained));
  CHECK_OK(pvmm_allocation_release(imported));
  CHECK_OK(pvmm_allocation_release(alloc)); /* the mapping keeps the memory */
  {
    unsigned char seen = 0;
    CHECK_OK(pvmm_copy_from_mapping(&seen, a + 7, 1, -1));
    CHECK(seen == 0x11);
  }
  CHECK_OK(pvmm_reservation_unmap(first, 0, gran));
  CHECK_OK(pvmm_reservation_release(first));
  CHECK_STATUS(pvmm_reservation_size(first, &size), pvmm_status_already_released, "released already");
}

static void host_memory(void) {
  pvmm_growable_options g = PVMM_INIT(pvmm_growable_options);
  pvmm_pointer_attributes attrs = PVMM_INIT(pvmm_pointer_attributes);
  pvmm_access_descriptor rw = {{pvmm_location_device, 0}, pvmm_access_read_write};
  pvmm_allocation_properties props = PVMM_INIT(pvmm_allocation_properties);
  pvmm_growable buffer;
  pvmm_pinned pinned;
  pvmm_managed managed;
  unsigned char* data = NULL;
  size_t size = 0, gran = 0;
  int moved = -1;

  CHECK_OK(pvmm_query_granularity(&props, &gran, NULL));
  props.exportable = pvmm_handle_posix_fd;
  g.properties = props;
  g.access = &rw;
  g.access_count = 1;
  g.chunk_size = gran;
  g.reserve_size = 4 * gran;
  CHECK_OK(pvmm_growable_create(&g, &buffer));
  CHECK_OK(pvmm_growable_resize(buffer, 2 * gran, &moved));
  CHECK_OK(pvmm_growable_data(buffer, (void**)&data, &size));
  CHECK(data != NULL && size == 2 * gran);
  {
    unsigned char three = 3, seen = 0;
    CHECK_OK(pvmm_copy_to_mapping(data + size - 1, &three, 1, -1));
    CHECK_OK(pvmm_growable_resize(buffer, 3 * gran, &moved));
    CHECK_OK(pvmm_growable_data(buffer, (void**)&data, &size));
    CHECK_OK(pvmm_copy_from_mapping(&seen, data + 2 * gran - 1, 1, -1));
    CHECK(size == 3 * gran && seen == 3);
  }
  {
    /* a descriptor: the three-chunk buffer exported as bytes and fds, rebuilt contiguous elsewhere */
    uint8_t bytes[512];
    int fds[8];
    size_t length = 0, fd_count = 0, j;
    pvmm_imported imported;
    void* copy = NULL;
    size_t copy_size = 0;
    unsigned char seen = 0;
    CHECK_STATUS(pvmm_growable_export(buffer, pvmm_handle_posix_fd, bytes, 1, &length, fds, 8, &fd_count),
                 pvmm_status_out_of_range, "no fd was kept");
    CHECK(fd_count == 3 && length > 1);
    CHECK_OK(pvmm_growable_export(buffer, pvmm_handle_posix_fd, bytes, sizeof bytes, &length, fds, 8, &fd_count));
    CHECK(fd_count == 3);
    CHECK_STATUS(pvmm_import_buffer(bytes, length - 1, fds, fd_count, &rw, 1, &imported), pvmm_status_protocol_error,
                 "");
    CHECK_OK(pvmm_import_buffer(bytes, length, fds, fd_count, &rw, 1, &imported));
    for (j = 0; j < fd_count && j < 8; ++j) close(fds[j]);
    CHECK_OK(pvmm_imported_data(imported, &copy, &copy_size));
    CHECK(copy_size == 3 * gran && copy != data);
    CHECK_OK(pvmm_copy_from_mapping(&seen, (unsigned char*)copy + 2 * gran - 1, 1, -1));
    CHECK(seen == 3);
    CHECK_OK(pvmm_imported_release(imported));
    CHECK_STATUS(pvmm_imported_release(imported), pvmm_status_already_released, "released already");
  }
  CHECK_OK(pvmm_growable_release(buffer));

  CHECK_OK(pvmm_pinned_create(8192, NULL, &pinned));
  CHECK_OK(pvmm_pinned_data(pinned, (void**)&data, &size));
  CHECK(size >= 8192);
  data[0] = 1;
  CHECK_OK(pvmm_query_pointer(data, &attrs));
  CHECK(attrs.kind == pvmm_memory_pinned && attrs.device_accessible_from_host == 1);
  CHECK_OK(pvmm_pinned_release(pinned));
  CHECK_STATUS(pvmm_pinned_release(pinned), pvmm_status_already_released, "released already");

  CHECK_OK(pvmm_managed_create(8192, pvmm_attach_global, &managed));
  CHECK_OK(pvmm_managed_data(managed, (void**)&data, &size));
  data[size - 1] = 2;
  CHECK_OK(pvmm_query_pointer(data, &attrs));
  CHECK(attrs.kind == pvmm_memory_managed);
  CHECK_OK(pvmm_managed_release(managed));
}

/* dma-buf export per chunk: a range over two mappings gives two pieces where the device exports dma-bufs, and
 * not_supported with the reason where it does not (the host backend: its memory is a memfd). */
static void dmabuf_per_chunk(int supported) {
  pvmm_allocation_properties props = PVMM_INIT(pvmm_allocation_properties);
  pvmm_access_descriptor rw = {{pvmm_location_device, 0}, pvmm_access_read_write};
  pvmm_allocation chunks[2];
  pvmm_reservation range;
  pvmm_dmabuf_piece pieces[4];
  size_t gran = 0, count = 0;
  char* base = NULL;
  int i;
  CHECK_OK(pvmm_reservation_granularity(&gran));
  CHECK_OK(pvmm_reservation_create(3 * gran, 0, NULL, &range));
  CHECK_OK(pvmm_reservation_address(range, (void**)&base));
  for (i = 0; i < 2; ++i) {
    CHECK_OK(pvmm_allocation_create(gran, &props, &chunks[i]));
    CHECK_OK(pvmm_reservation_map(range, (size_t)i * gran, chunks[i], 0, gran, NULL));
  }
  CHECK_OK(pvmm_reservation_set_access(range, 0, 2 * gran, &rw, 1));
  CHECK_STATUS(pvmm_export_dmabuf(base, 3 * gran, pieces, 4, &count), pvmm_status_not_mapped, "not mapped");
  if (!supported) {
    CHECK_STATUS(pvmm_export_dmabuf(base, 2 * gran, pieces, 4, &count), pvmm_status_not_supported,
                 "does not export dma-bufs");
  } else {
    CHECK_OK(pvmm_export_dmabuf(base, 2 * gran, pieces, 4, &count));
    CHECK(count == 2 && pieces[0].address == base && pieces[0].size == gran && pieces[1].address == base + gran &&
          pieces[1].size == gran && pieces[0].fd >= 0 && pieces[1].fd >= 0);
    for (i = 0; i < (int)count && i < 2; ++i) close(pieces[i].fd);
    CHECK_STATUS(pvmm_export_dmabuf(base, 2 * gran, pieces, 1, &count), pvmm_status_out_of_range, "capacity is 1");
    CHECK(count == 2);
  }
  CHECK_OK(pvmm_reservation_unmap(range, 0, 2 * gran));
  CHECK_OK(pvmm_reservation_release(range));
  for (i = 0; i < 2; ++i) CHECK_OK(pvmm_allocation_release(chunks[i]));
}

/* A pool allocation ordered on a stream pvmm made, an event between two streams, the pointer query. */
static void pools_and_streams(void) {
  pvmm_pool_options options = PVMM_INIT(pvmm_pool_options);
  pvmm_pointer_attributes attrs = PVMM_INIT(pvmm_pointer_attributes);
  pvmm_stream streams[2];
  pvmm_stream_ref refs[2];
  pvmm_event event;
  pvmm_pool pool;
  void* pointer = NULL;
  uint64_t reserved = 0, used = 0;
  unsigned char mark = 0x3c, seen = 0;
  int i;
  for (i = 0; i < 2; ++i) {
    CHECK_OK(pvmm_stream_create(0, &streams[i]));
    CHECK_OK(pvmm_stream_native(streams[i], &refs[i]));
    CHECK(refs[i].device == 0);
  }
  CHECK_OK(pvmm_event_create(0, &event));
  CHECK_OK(pvmm_pool_create(&options, &pool));
  CHECK_OK(pvmm_pool_allocate_async(pool, 1 << 16, refs[0], &pointer));
  CHECK_OK(pvmm_copy_async(pointer, &mark, 1, refs[0])); /* in stream order, after the allocation */
  CHECK_OK(pvmm_stream_synchronize(refs[0]));
  CHECK_OK(pvmm_copy_from_mapping(&seen, pointer, 1, 0));
  CHECK(seen == 0x3c);
  mark = 0x3d;
  CHECK_OK(pvmm_copy_to_mapping(pointer, &mark, 1, 0));
  CHECK_OK(pvmm_copy_async(&seen, pointer, 1, refs[0]));
  CHECK_OK(pvmm_stream_synchronize(refs[0]));
  CHECK(seen == 0x3d);
  CHECK_OK(pvmm_query_pointer(pointer, &attrs));
  CHECK(attrs.kind == pvmm_memory_pool && attrs.device == 0 && attrs.size >= (1 << 16));
  CHECK_OK(pvmm_pool_usage(pool, &reserved, &used));
  CHECK(used >= (1 << 16) && reserved >= used);
  CHECK_OK(pvmm_event_record(event, refs[0]));
  CHECK_OK(pvmm_stream_wait_event(refs[1], event));
  CHECK_OK(pvmm_pool_free_async(pool, pointer, refs[1]));
  CHECK_OK(pvmm_event_synchronize(event));
  CHECK_OK(pvmm_stream_synchronize(refs[1]));
  {
    uint64_t native = 0;
    int done = -1;
    CHECK_OK(pvmm_event_native(event, &native));
    CHECK(native != 0);
    CHECK_OK(pvmm_event_query(event, &done));
    CHECK(done == 1);
    done = -1;
    CHECK_OK(pvmm_stream_query(refs[1], &done));
    CHECK(done == 1);
  }
  {
    /* The threshold reads back as set: UINT64_MAX from pvmm_pool_create; at 0, a synchronize gives back what the
     * pool holds unused. */
    uint64_t threshold = 0;
    CHECK_OK(pvmm_pool_release_threshold(pool, &threshold));
    CHECK(threshold == UINT64_MAX);
    CHECK_OK(pvmm_pool_set_release_threshold(pool, 0));
    CHECK_OK(pvmm_pool_release_threshold(pool, &threshold));
    CHECK(threshold == 0);
    CHECK_OK(pvmm_pool_allocate_async(pool, 4096, refs[1], &pointer));
    CHECK_OK(pvmm_pool_free_async(pool, pointer, refs[1]));
    CHECK_OK(pvmm_stream_synchronize(refs[1]));
    CHECK_OK(pvmm_pool_usage(pool, &reserved, &used));
    CHECK(used == 0 && reserved == 0);
  }
  CHECK_OK(pvmm_pool_trim_to(pool, 0));
  CHECK_OK(pvmm_pool_release(pool));
  CHECK_STATUS(pvmm_pool_release(pool), pvmm_status_already_released, "released already");
  CHECK_OK(pvmm_event_release(event));
  for (i = 0; i < 2; ++i) CHECK_OK(pvmm_stream_release(streams[i]));
  CHECK_STATUS(pvmm_stream_native(streams[0], &refs[0]), pvmm_status_already_released, "pvmm_stream was released");
}

/* A pool shared as the C++ API shares it, both ends in this process (the host backend imports its own pools; the
 * GPU drivers need two processes: the consumer example does that): the importer reads the exporter's bytes and
 * writes its own, an imported pool refuses to allocate, a pointer imported twice is busy, a freed one is stale, and
 * an imported allocation is freed once. */
static void pool_sharing(void) {
  pvmm_pool_options options = PVMM_INIT(pvmm_pool_options);
  pvmm_access_descriptor rw = {{pvmm_location_device, 0}, pvmm_access_read_write};
  pvmm_stream stream;
  pvmm_stream_ref on;
  pvmm_pool pool, imported;
  pvmm_pool_id id;
  pvmm_pool_pointer_export record;
  pvmm_pool_allocation held, again = {0};
  void *pointer = NULL, *theirs = NULL;
  size_t size = 0;
  int fd = -1;
  unsigned char mark = 0x9e, answer = 0x4b, seen = 0;
  options.exportable = pvmm_handle_posix_fd;
  CHECK_OK(pvmm_stream_create(0, &stream));
  CHECK_OK(pvmm_stream_native(stream, &on));
  CHECK_OK(pvmm_pool_create(&options, &pool));
  CHECK_OK(pvmm_pool_set_access(pool, &rw, 1));
  CHECK_OK(pvmm_pool_allocate_async(pool, 1 << 16, on, &pointer));
  CHECK_OK(pvmm_stream_synchronize(on));
  CHECK_OK(pvmm_copy_to_mapping(pointer, &mark, 1, 0));
  CHECK_STATUS(pvmm_pool_export_pointer(pool, pointer, &record), pvmm_status_invalid_argument, "export_posix_fd");
  CHECK_OK(pvmm_pool_export_posix_fd(pool, &fd, &id));
  CHECK_OK(pvmm_pool_export_pointer(pool, pointer, &record));
  CHECK(record.size == 1 << 16 && memcmp(&record.pool, &id, sizeof id) == 0);
  CHECK_OK(pvmm_pool_import_posix_fd(fd, &id, 0, &imported));
  CHECK(fcntl(fd, F_GETFD) != -1); /* borrowed: still the caller's */
  close(fd);
  CHECK_STATUS(pvmm_pool_allocate_async(imported, 64, on, &theirs), pvmm_status_invalid_argument,
               "an imported pool cannot allocate");
  CHECK_OK(pvmm_pool_import_pointer(imported, &record, on, &held));
  CHECK_STATUS(pvmm_pool_import_pointer(imported, &record, on, &again), pvmm_status_busy, "imported already");
  CHECK(again.id == 0);
  CHECK_OK(pvmm_pool_allocation_data(held, &theirs, &size));
  CHECK(theirs != NULL && theirs != pointer && size == 1 << 16);
  CHECK_OK(pvmm_copy_from_mapping(&seen, theirs, 1, 0));
  CHECK(seen == mark);
  CHECK_OK(pvmm_copy_to_mapping((unsigned char*)theirs + 1, &answer, 1, 0));
  CHECK_OK(pvmm_copy_from_mapping(&seen, (unsigned char*)pointer + 1, 1, 0));
  CHECK(seen == answer);
  CHECK_OK(pvmm_pool_allocation_free_async(held, on)); /* the importer frees first */
  CHECK_STATUS(pvmm_pool_allocation_free_async(held, on), pvmm_status_already_released, "released already");
  CHECK_STATUS(pvmm_pool_allocation_release(held), pvmm_status_already_released, "released already");
  CHECK_OK(pvmm_stream_synchronize(on));
  CHECK_OK(pvmm_pool_free_async(pool, pointer, on));
  CHECK_OK(pvmm_stream_synchronize(on));
  CHECK_STATUS(pvmm_pool_import_pointer(imported, &record, on, &again), pvmm_status_invalid_handle, ""); /* stale */
  CHECK_OK(pvmm_pool_release(imported));
  CHECK_OK(pvmm_pool_release(pool));
  CHECK_OK(pvmm_stream_release(stream));
}

/* Managed memory advised and prefetched in a stream's order; the device's memory figures. */
static void managed_and_memory(void) {
  pvmm_managed managed;
  pvmm_stream stream;
  pvmm_stream_ref on;
  pvmm_location device0 = {pvmm_location_device, 0}, host = {pvmm_location_host, 0};
  unsigned char* data = NULL;
  size_t size = 0, free_bytes = 0, total_bytes = 0;
  int shared = -1;
  CHECK_OK(pvmm_query_memory(0, &free_bytes, &total_bytes, &shared));
  CHECK(total_bytes > 0 && free_bytes <= total_bytes && (shared == 0 || shared == 1));
  CHECK_OK(pvmm_managed_create(1 << 16, pvmm_attach_global, &managed));
  CHECK_OK(pvmm_managed_data(managed, (void**)&data, &size));
  CHECK_OK(pvmm_managed_advise(data, size, pvmm_advice_set_read_mostly, NULL));
  CHECK_STATUS(pvmm_managed_advise(data, size, pvmm_advice_set_accessed_by, NULL), pvmm_status_invalid_argument, "");
  CHECK_OK(pvmm_managed_advise(data, size, pvmm_advice_set_accessed_by, &device0));
  CHECK_OK(pvmm_stream_create(0, &stream));
  CHECK_OK(pvmm_stream_native(stream, &on));
  CHECK_OK(pvmm_managed_prefetch_async(data, size, host, on));
  CHECK_OK(pvmm_stream_synchronize(on));
  data[size - 1] = 7;
  CHECK(data[size - 1] == 7);
  CHECK_OK(pvmm_stream_release(stream));
  CHECK_OK(pvmm_managed_release(managed));
}

/* The fd transport: an exported fd and bytes over a named endpoint, imported on the other end (one process,
 * both ends), the same memory read back. */
static void fd_transport(void) {
  pvmm_allocation_properties props = PVMM_INIT(pvmm_allocation_properties);
  pvmm_access_descriptor rw = {{pvmm_location_device, 0}, pvmm_access_read_write};
  pvmm_listener listener;
  pvmm_connection client, server;
  pvmm_allocation memory, imported;
  pvmm_reservation range;
  char name[64], payload[16] = {0};
  size_t gran = 0, fd_count = 0, payload_size = 0;
  int fd = -1, received = -1;
  void *at = NULL, *there = NULL;
  unsigned char mark = 0x6d, seen = 0;
  snprintf(name, sizeof name, "pvmm-c-api-%ld", (long)getpid());
  props.exportable = pvmm_handle_posix_fd;
  CHECK_OK(pvmm_reservation_granularity(&gran));
  CHECK_OK(pvmm_allocation_create(gran, &props, &memory));
  CHECK_OK(pvmm_reservation_create(2 * gran, 0, NULL, &range));
  CHECK_OK(pvmm_reservation_map(range, 0, memory, 0, gran, &at));
  CHECK_OK(pvmm_reservation_set_access(range, 0, gran, &rw, 1));
  CHECK_OK(pvmm_copy_to_mapping(at, &mark, 1, -1));
  CHECK_OK(pvmm_listen(name, &listener));
  CHECK_OK(pvmm_connect(name, 5000, &client));
  CHECK_OK(pvmm_listener_accept(listener, 5000, &server));
  CHECK_OK(pvmm_allocation_export_posix_fd(memory, &fd));
  CHECK_OK(pvmm_connection_send(client, &fd, 1, "chunk", 6, 5000));
  close(fd);
  CHECK_OK(pvmm_connection_receive(server, &received, 1, &fd_count, payload, sizeof payload, &payload_size, 5000));
  CHECK(fd_count == 1 && payload_size == 6 && strcmp(payload, "chunk") == 0 && received >= 0);
  CHECK_OK(pvmm_allocation_import_posix_fd(received, gran, &imported));
  close(received);
  CHECK_OK(pvmm_reservation_map(range, gran, imported, 0, gran, &there));
  CHECK_OK(pvmm_reservation_set_access(range, gran, gran, &rw, 1));
  CHECK_OK(pvmm_copy_from_mapping(&seen, there, 1, -1));
  CHECK(seen == 0x6d);
  CHECK_OK(pvmm_connection_release(client));
  CHECK_STATUS(pvmm_connection_receive(server, &received, 1, &fd_count, payload, sizeof payload, &payload_size, 2000),
               pvmm_status_peer_lost, "");
  CHECK_OK(pvmm_connection_release(server));
  CHECK_OK(pvmm_listener_release(listener));
  CHECK_OK(pvmm_reservation_unmap(range, 0, 2 * gran));
  CHECK_OK(pvmm_reservation_release(range));
  CHECK_OK(pvmm_allocation_release(imported));
  CHECK_OK(pvmm_allocation_release(memory));
}

/* ---- a team of 3 threads over the C bootstrap ---- */

/* Whether the backend is a GPU's (not "host"): its stream-ordered waits between thread ranks are refused. Set once
   by main before any thread starts. */
static int on_gpu_backend;
enum { ranks = 3 };
typedef struct rank_job {
  tb_rank self;
  int ok;
} rank_job;

static void* run_rank(void* argument) {
  rank_job* job = (rank_job*)argument;
  pvmm_bootstrap_ops ops = tb_ops(&job->self);
  pvmm_team_options topts = PVMM_INIT(pvmm_team_options);
  pvmm_window_options wopts = PVMM_INIT(pvmm_window_options);
  pvmm_bootstrap boot;
  pvmm_team team;
  pvmm_window window;
  int rank = -1, size = 0, peer;
  void* local = NULL;
  size_t bytes = 0;
  job->ok = 0;
  topts.timeout_ms = 20000;
  wopts.size = 4096;
  wopts.timeout_ms = 20000;
  wopts.signal_channels = 1;
  if (pvmm_bootstrap_create(&ops, &boot) != pvmm_status_ok) return NULL;
  if (pvmm_team_create(boot, &topts, &team) != pvmm_status_ok) {
    fprintf(stderr, "rank %d: %s\n", job->self.rank, pvmm_last_error_message());
    pvmm_bootstrap_release(boot);
    return NULL;
  }
  if (pvmm_team_info(team, &rank, &size, NULL, NULL) == pvmm_status_ok && rank == job->self.rank && size == ranks &&
      pvmm_window_create(team, &wopts, &window) == pvmm_status_ok) {
    int good = pvmm_window_peer(window, rank, &local, &bytes) == pvmm_status_ok && bytes >= 4096;
    if (good) {
      unsigned char mark = (unsigned char)(0x40 + rank);
      good = pvmm_copy_to_mapping(local, &mark, 1, -1) == pvmm_status_ok &&
             pvmm_copy_to_mapping((unsigned char*)local + bytes - 1, &mark, 1, -1) == pvmm_status_ok;
    }
    good = good && pvmm_bootstrap_barrier(boot, pvmm_monotonic_ns() + 20000000000LL) == pvmm_status_ok;
    for (peer = 0; good && peer < ranks; ++peer) {
      unsigned char* theirs = NULL;
      unsigned char first_byte = 0, last_byte = 0;
      good = pvmm_window_peer(window, peer, (void**)&theirs, &bytes) == pvmm_status_ok &&
             pvmm_copy_from_mapping(&first_byte, theirs, 1, -1) == pvmm_status_ok &&
             pvmm_copy_from_mapping(&last_byte, theirs + bytes - 1, 1, -1) == pvmm_status_ok &&
             first_byte == 0x40 + peer && last_byte == 0x40 + peer;
    }
    good = good && pvmm_bootstrap_barrier(boot, pvmm_monotonic_ns() + 20000000000LL) == pvmm_status_ok;
    if (good) { /* two stream-ordered barriers on the signal pads, where the backend has signal kernels */
      pvmm_stream stream;
      pvmm_stream_ref on;
      void* const* table = NULL;
      pvmm_status first;
      good = pvmm_window_device_pointer_table(window, &table) == pvmm_status_ok && table != NULL &&
             pvmm_stream_create(0, &stream) == pvmm_status_ok;
      if (good) {
        good = pvmm_stream_native(stream, &on) == pvmm_status_ok;
        first = good ? pvmm_window_barrier(window, 0, on, 10000) : pvmm_status_ok;
        if (good && on_gpu_backend) /* thread ranks on one GPU share a context: refused, naming it */
          good = first == pvmm_status_not_supported &&
                 strstr(pvmm_last_error_message(), "of this window are in one process on one device") != NULL;
        else if (good)
          good = first == pvmm_status_ok && pvmm_window_barrier(window, 0, on, 10000) == pvmm_status_ok &&
                 pvmm_stream_synchronize(on) == pvmm_status_ok && pvmm_window_signal_status(window) == pvmm_status_ok;
        good = pvmm_stream_release(stream) == pvmm_status_ok && good;
      }
    }
    if (!good) fprintf(stderr, "rank %d: %s\n", rank, pvmm_last_error_message());
    job->ok = good && pvmm_window_release(window) == pvmm_status_ok;
  } else {
    fprintf(stderr, "rank %d: %s\n", job->self.rank, pvmm_last_error_message());
  }
  pvmm_team_release(team);
  pvmm_bootstrap_release(boot);
  return NULL;
}

static void team_over_c_bootstrap(void) {
  tb_group group;
  rank_job jobs[ranks];
  pthread_t threads[ranks];
  int r;
  tb_group_init(&group, ranks);
  for (r = 0; r < ranks; ++r) {
    jobs[r].self.group = &group;
    jobs[r].self.rank = r;
    pthread_create(&threads[r], NULL, run_rank, &jobs[r]);
  }
  for (r = 0; r < ranks; ++r) {
    pthread_join(threads[r], NULL);
    CHECK(jobs[r].ok);
  }
  CHECK(group.destroyed == ranks); /* every rank's destroy ran once its last reference went */
  tb_group_destroy(&group);
}

/* A callback that fails: its status and detail come back, and the bootstrap stays broken (the base's contract). */
static int failing_allgather(void* c, const void* m, size_t b, void* a, uint64_t n, int64_t d) {
  (void)c, (void)m, (void)b, (void)a, (void)n, (void)d;
  pvmm_bootstrap_fail_detail("the runtime's allgather lost rank 1");
  return pvmm_status_peer_lost;
}
static int strange_allgather(void* c, const void* m, size_t b, void* a, uint64_t n, int64_t d) {
  (void)c, (void)m, (void)b, (void)a, (void)n, (void)d;
  return 777;
}
static void abort_nothing(void* c) { (void)c; }

static void failing_callbacks(void) {
  tb_group group;
  tb_rank self;
  pvmm_bootstrap_ops ops;
  pvmm_bootstrap boot;
  int mine = 1, all[2];
  tb_group_init(&group, 2);
  self.group = &group;
  self.rank = 0;
  ops = tb_ops(&self);
  ops.allgather = failing_allgather;
  ops.abort = abort_nothing;
  CHECK_OK(pvmm_bootstrap_create(&ops, &boot));
  CHECK_STATUS(pvmm_bootstrap_allgather(boot, &mine, sizeof mine, all, INT64_MAX), pvmm_status_peer_lost,
               "the runtime's allgather lost rank 1");
  CHECK_STATUS(pvmm_bootstrap_barrier(boot, INT64_MAX), pvmm_status_peer_lost, "lost rank 1"); /* broken */
  CHECK_OK(pvmm_bootstrap_release(boot));
  ops.allgather = strange_allgather;
  CHECK_OK(pvmm_bootstrap_create(&ops, &boot));
  CHECK_STATUS(pvmm_bootstrap_allgather(boot, &mine, sizeof mine, all, pvmm_monotonic_ns() + 1000000000LL),
               pvmm_status_backend_error, "777 is not a pvmm_status");
  CHECK_OK(pvmm_bootstrap_release(boot));
  CHECK_OK(pvmm_bootstrap_create(&ops, &boot));
  CHECK_STATUS(pvmm_bootstrap_send(boot, 1, 0, &mine, sizeof mine, INT64_MAX), pvmm_status_not_supported,
               "pvmm_bootstrap_ops.send is NULL");
  CHECK_OK(pvmm_bootstrap_release(boot));
  CHECK(group.destroyed == 3);
  tb_group_destroy(&group);
}

/* Every part once. */
static void everything(const pvmm_backend_info* backend, const pvmm_device_info* device) {
  memory_round_trip();
  dmabuf_per_chunk(device->sharing_dmabuf);
  host_memory();
  fd_transport();
  if (device->pools_supported) pools_and_streams();
  if (device->pools_ipc_posix_fd && strcmp(backend->name, "host") == 0) pool_sharing();
  if (device->managed_supported && device->managed_concurrent_access) managed_and_memory();
  team_over_c_bootstrap();
  failing_callbacks();
}

int main(void) {
  int fds_before = 0;
  int count = 0;
  pvmm_backend_info backend = PVMM_INIT(pvmm_backend_info);
  pvmm_device_info device = PVMM_INIT(pvmm_device_info);
  CHECK_OK(pvmm_query_backend(&backend));
  CHECK_OK(pvmm_device_count(&count));
  if (!backend.available || count < 1) {
    printf("[pvmm-skip] the %s backend has no device here: %s\n", backend.name, backend.unavailable_reason);
    return 0;
  }
  CHECK_OK(pvmm_query_device(0, &device));
  on_gpu_backend = strcmp(backend.name, "host") != 0;
  CHECK(device.ordinal == 0 && device.vmm_supported == 1 && strlen(device.name) > 0);
  /* Twice: a GPU driver opens fds of its own at first use (measured on the H200: the check failed with the
     baseline taken before), which are no leak; the second pass must leave the fds as it found them. */
  everything(&backend, &device);
  fds_before = open_fds();
  everything(&backend, &device);
  CHECK(open_fds() == fds_before);
  return check_summary("c_api/functional");
}
