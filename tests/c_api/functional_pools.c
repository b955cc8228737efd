/* pvmm's C interface doing real work on the configured backend, streams and pools: a pool allocation ordered on
 * streams with an event between them, a pool shared through an fd and exported pointers, managed memory advised
 * and prefetched. No fd is leaked. Plain C11. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdint.h>
#include <unistd.h>

#include "functional.h"

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

static void everything(const pvmm_backend_info* backend, const pvmm_device_info* device) {
  if (device->pools_supported) pools_and_streams();
  if (device->pools_ipc_posix_fd && strcmp(backend->name, "host") == 0) pool_sharing();
  if (device->managed_supported && device->managed_concurrent_access) managed_and_memory();
}

int main(void) { return functional_main("c_api/functional_pools", everything); }
