/* Bad input to pvmm's C interface, streams, events and pools, pool sharing included: a specific status and message,
 * never a crash (bad_input.h). Plain C11. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdint.h>
#include <unistd.h>

#include "bad_input.h"

int main(void) {
  pvmm_access_descriptor bad_grant = {{7, 0}, pvmm_access_read_write};
  void* address = NULL;
  int value = 0;

  if (!have_device()) return check_summary("c_api/bad_input_streams");
  /* streams, events, pools */
  {
    pvmm_stream stream = {0};
    pvmm_event event = {0};
    pvmm_pool pool = {0};
    pvmm_stream_ref ref = {0, 0};
    pvmm_pool_options popts = PVMM_INIT(pvmm_pool_options);
    uint64_t a = 0, b = 0;
    CHECK_STATUS(pvmm_stream_create(0, NULL), pvmm_status_invalid_argument, "out is NULL");
    CHECK_STATUS(pvmm_stream_create(-1, &stream), pvmm_status_invalid_device, "");
    CHECK_STATUS(pvmm_stream_release(stream), pvmm_status_invalid_handle, NULL_HANDLE);
    CHECK_STATUS(pvmm_stream_native(stream, &ref), pvmm_status_invalid_handle, NULL_HANDLE);
    CHECK_STATUS(pvmm_stream_native(stream, NULL), pvmm_status_invalid_argument, "ref is NULL");
    CHECK_STATUS(pvmm_event_create(0, NULL), pvmm_status_invalid_argument, "out is NULL");
    CHECK_STATUS(pvmm_event_create(-1, &event), pvmm_status_invalid_device, "");
    CHECK_STATUS(pvmm_event_release(event), pvmm_status_invalid_handle, NULL_HANDLE);
    CHECK_STATUS(pvmm_event_record(event, ref), pvmm_status_invalid_handle, NULL_HANDLE);
    CHECK_STATUS(pvmm_event_synchronize(event), pvmm_status_invalid_handle, NULL_HANDLE);
    CHECK_STATUS(pvmm_stream_wait_event(ref, event), pvmm_status_invalid_handle, NULL_HANDLE);
    CHECK_STATUS(pvmm_event_native(event, &a), pvmm_status_invalid_handle, NULL_HANDLE);
    CHECK_STATUS(pvmm_event_native(event, NULL), pvmm_status_invalid_argument, "native is NULL");
    CHECK_STATUS(pvmm_event_query(event, &value), pvmm_status_invalid_handle, NULL_HANDLE);
    CHECK_STATUS(pvmm_event_query(event, NULL), pvmm_status_invalid_argument, "done is NULL");
    /* borrowed native streams: {0, d} is no stream; a value that is not one is refused where pvmm can tell (the host
       backend: on a GPU it would be the driver's undefined behaviour) */
    CHECK_STATUS(pvmm_stream_synchronize(ref), pvmm_status_invalid_argument, "the stream is empty");
    CHECK_STATUS(pvmm_stream_query(ref, &value), pvmm_status_invalid_argument, "the stream is empty");
    CHECK_STATUS(pvmm_stream_query(ref, NULL), pvmm_status_invalid_argument, "done is NULL");
    CHECK_STATUS(pvmm_copy_async(&a, &b, sizeof a, ref), pvmm_status_invalid_argument, "the stream is empty");
    {
      pvmm_backend_info here = PVMM_INIT(pvmm_backend_info);
      pvmm_stream_ref made_up = {0x5eed, 0};
      CHECK_OK(pvmm_query_backend(&here));
      if (strcmp(here.name, "host") == 0) {
        CHECK_STATUS(pvmm_stream_synchronize(made_up), pvmm_status_invalid_handle, "");
        CHECK_STATUS(pvmm_stream_query(made_up, &value), pvmm_status_invalid_handle, "");
      }
    }
    CHECK_STATUS(pvmm_pool_create(NULL, &pool), pvmm_status_invalid_argument, "options is NULL");
    CHECK_STATUS(pvmm_pool_create(&popts, NULL), pvmm_status_invalid_argument, "out is NULL");
    popts.location.kind = 8;
    CHECK_STATUS(pvmm_pool_create(&popts, &pool), pvmm_status_invalid_location, "location kind 8");
    popts.location.kind = pvmm_location_device;
    popts.exportable = 64;
    CHECK_STATUS(pvmm_pool_create(&popts, &pool), pvmm_status_invalid_argument, "pvmm_handle_");
    popts.struct_size = 3;
    CHECK_STATUS(pvmm_pool_create(&popts, &pool), pvmm_status_version_mismatch, "pvmm_pool_options");
    CHECK(pool.id == 0);
    CHECK_STATUS(pvmm_pool_release(pool), pvmm_status_invalid_handle, NULL_HANDLE);
    CHECK_STATUS(pvmm_pool_allocate_async(pool, 64, ref, &address), pvmm_status_invalid_handle, NULL_HANDLE);
    CHECK_STATUS(pvmm_pool_allocate_async(pool, 64, ref, NULL), pvmm_status_invalid_argument, "pointer is NULL");
    CHECK_STATUS(pvmm_pool_free_async(pool, &value, ref), pvmm_status_invalid_handle, NULL_HANDLE);
    CHECK_STATUS(pvmm_pool_trim_to(pool, 0), pvmm_status_invalid_handle, NULL_HANDLE);
    CHECK_STATUS(pvmm_pool_usage(pool, &a, &b), pvmm_status_invalid_handle, NULL_HANDLE);
    CHECK_STATUS(pvmm_pool_usage(pool, NULL, &b), pvmm_status_invalid_argument, "reserved is NULL");
    CHECK_STATUS(pvmm_pool_set_release_threshold(pool, 0), pvmm_status_invalid_handle, NULL_HANDLE);
    CHECK_STATUS(pvmm_pool_release_threshold(pool, &a), pvmm_status_invalid_handle, NULL_HANDLE);
    CHECK_STATUS(pvmm_pool_release_threshold(pool, NULL), pvmm_status_invalid_argument, "bytes is NULL");
    {
      pvmm_access_descriptor rw = {{pvmm_location_device, 0}, pvmm_access_read_write};
      CHECK_STATUS(pvmm_pool_set_access(pool, &rw, 1), pvmm_status_invalid_handle, NULL_HANDLE);
    }
    popts.struct_size = sizeof popts;
    popts.exportable = 0;
    CHECK_OK(pvmm_pool_create(&popts, &pool));
    CHECK_OK(pvmm_stream_create(0, &stream));
    CHECK_OK(pvmm_stream_native(stream, &ref));
    CHECK_STATUS(pvmm_pool_allocate_async(pool, 0, ref, &address), pvmm_status_invalid_size, "");
    CHECK_STATUS(pvmm_pool_free_async(pool, &value, ref), pvmm_status_invalid_argument, "");
    CHECK_STATUS(pvmm_pool_set_access(pool, NULL, 1), pvmm_status_invalid_argument, "grants is NULL");
    CHECK_STATUS(pvmm_copy_async(NULL, &b, sizeof b, ref), pvmm_status_invalid_argument, "the destination is null");
    CHECK_STATUS(pvmm_copy_async(&a, NULL, sizeof a, ref), pvmm_status_invalid_argument, "the source is null");
    CHECK_STATUS(pvmm_pool_set_access(pool, &bad_grant, 1), pvmm_status_invalid_location, "kind 7");
    CHECK_OK(pvmm_event_create(0, &event));
    CHECK_OK(pvmm_event_release(event));
    CHECK_STATUS(pvmm_event_native(event, &a), pvmm_status_already_released, FREED);
    CHECK_STATUS(pvmm_event_query(event, &value), pvmm_status_already_released, FREED);
    CHECK_STATUS(pvmm_event_release(event), pvmm_status_already_released, FREED); /* double free */

    /* pool sharing: NULL, a pool that is not exportable or not imported, a forged record, FOREIGN handles */
    {
      pvmm_pool imported = {0};
      pvmm_pool_id id;
      pvmm_pool_pointer_export record;
      pvmm_pool_allocation held = {0};
      pvmm_pool_allocation pool_as_allocation;
      int fd = -1;
      memset(&id, 0, sizeof id);
      memset(&record, 0, sizeof record);
      CHECK_STATUS(pvmm_pool_export_posix_fd(pool, NULL, &id), pvmm_status_invalid_argument, "fd is NULL");
      CHECK_STATUS(pvmm_pool_export_posix_fd(pool, &fd, NULL), pvmm_status_invalid_argument, "id is NULL");
      CHECK_STATUS(pvmm_pool_export_posix_fd(pool, &fd, &id), pvmm_status_handle_type_not_requested, "");
      CHECK(fd == -1);
      CHECK_STATUS(pvmm_pool_import_posix_fd(-1, &id, 0, &imported), pvmm_status_invalid_handle, "");
      fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
      CHECK(fd >= 0);
      CHECK_STATUS(pvmm_pool_import_posix_fd(fd, NULL, 0, &imported), pvmm_status_invalid_argument, "id is NULL");
      CHECK_STATUS(pvmm_pool_import_posix_fd(fd, &id, 0, NULL), pvmm_status_invalid_argument, "out is NULL");
      CHECK_STATUS(pvmm_pool_import_posix_fd(fd, &id, 0, &imported), pvmm_status_invalid_handle, "no pool identity");
      id.bytes[3] = 1; /* an identity, but the fd is no pool: refused (the code is the driver's; the host's is
                          invalid_handle, not_supported where pools cannot be shared) */
      CHECK(pvmm_pool_import_posix_fd(fd, &id, 0, &imported) != pvmm_status_ok);
      CHECK(imported.id == 0 && fcntl(fd, F_GETFD) != -1); /* the borrowed fd is still open */
      close(fd);
      fd = -1;
      CHECK_STATUS(pvmm_pool_export_pointer(pool, &value, NULL), pvmm_status_invalid_argument, "out is NULL");
      CHECK_STATUS(pvmm_pool_export_pointer(pool, &value, &record), pvmm_status_handle_type_not_requested, "");
      CHECK_STATUS(pvmm_pool_import_pointer(pool, NULL, ref, &held), pvmm_status_invalid_argument, "from is NULL");
      CHECK_STATUS(pvmm_pool_import_pointer(pool, &record, ref, NULL), pvmm_status_invalid_argument, "out is NULL");
      CHECK_STATUS(pvmm_pool_import_pointer(pool, &record, ref, &held), pvmm_status_invalid_argument, "");
      CHECK(held.id == 0);
      CHECK_STATUS(pvmm_pool_allocation_data(held, &address, NULL), pvmm_status_invalid_handle, NULL_HANDLE);
      CHECK_STATUS(pvmm_pool_allocation_data(held, NULL, NULL), pvmm_status_invalid_argument, "data is NULL");
      CHECK_STATUS(pvmm_pool_allocation_free_async(held, ref), pvmm_status_invalid_handle, NULL_HANDLE);
      CHECK_STATUS(pvmm_pool_allocation_release(held), pvmm_status_invalid_handle, NULL_HANDLE);
      pool_as_allocation.id = pool.id;
      CHECK_STATUS(pvmm_pool_allocation_release(pool_as_allocation), pvmm_status_invalid_handle,
                   "a pvmm_pool handle where a pvmm_pool_allocation handle belongs");
    }
    CHECK_OK(pvmm_stream_release(stream));
    CHECK_OK(pvmm_pool_release(pool));
    CHECK_STATUS(pvmm_pool_trim_to(pool, 0), pvmm_status_already_released, FREED);
    CHECK_STATUS(pvmm_pool_export_posix_fd(pool, &value, NULL), pvmm_status_invalid_argument, "id is NULL");
    {
      pvmm_pool_id id;
      pvmm_pool_pointer_export record;
      pvmm_pool_allocation held = {0};
      CHECK_STATUS(pvmm_pool_export_posix_fd(pool, &value, &id), pvmm_status_already_released, FREED);
      CHECK_STATUS(pvmm_pool_export_pointer(pool, &value, &record), pvmm_status_already_released, FREED);
      memset(&record, 0, sizeof record);
      CHECK_STATUS(pvmm_pool_import_pointer(pool, &record, ref, &held), pvmm_status_already_released, FREED);
      CHECK_STATUS(pvmm_pool_set_access(pool, NULL, 0), pvmm_status_already_released, FREED);
    }
  }
  return check_summary("c_api/bad_input_streams");
}
