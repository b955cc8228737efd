/* Every entry point of pvmm's C interface with bad input (NULL, zero, foreign, freed and double-freed handles,
 * handles of another type, wrong struct sizes, a bootstrap table of the wrong version): a specific status and
 * message, never a crash. Plain C11. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"

static const char* const freed = "released already";
static const char* const foreign = "is not a";
static const char* const null_handle = "a null";

static int dummy_allgather(void* c, const void* m, size_t b, void* a, uint64_t n, int64_t d) {
  (void)c, (void)m, (void)b, (void)a, (void)n, (void)d;
  return 0;
}
static void dummy_abort(void* c) { (void)c; }

int main(void) {
  pvmm_allocation_properties props = PVMM_INIT(pvmm_allocation_properties);
  pvmm_allocation_properties bad_props = {sizeof(pvmm_allocation_properties) + 8, {0, 0}, 0, 0, 0};
  pvmm_allocation alloc = {0}, dead_alloc = {0}, out_alloc = {0};
  pvmm_reservation res = {0}, dead_res = {0}, out_res = {0};
  pvmm_growable grow = {0};
  pvmm_pinned pin = {0};
  pvmm_managed man = {0};
  pvmm_bootstrap boot = {0};
  pvmm_team team = {0};
  pvmm_window win = {0};
  const pvmm_allocation null_alloc = {0};
  const pvmm_allocation foreign_alloc = {0x0100000100000007ull};
  pvmm_allocation reservation_as_alloc;
  size_t gran = 0, size = 0;
  void* address = NULL;
  int value = 0, fd = -1;
  pvmm_fabric_handle fabric;
  pvmm_access_descriptor grant = {{pvmm_location_device, 0}, pvmm_access_read_write};
  pvmm_access_descriptor bad_grant = {{7, 0}, pvmm_access_read_write};
  pvmm_access_descriptor bad_access = {{pvmm_location_device, 0}, 9};
  pvmm_location bad_location = {9, 0};
  pvmm_device_info device = PVMM_INIT(pvmm_device_info);
  pvmm_backend_info backend = PVMM_INIT(pvmm_backend_info);
  pvmm_pointer_attributes attrs = PVMM_INIT(pvmm_pointer_attributes);
  pvmm_pinned_options bad_pinned = {1, 1, 1, 0};
  pvmm_growable_options gopts = PVMM_INIT(pvmm_growable_options);
  pvmm_team_options topts = PVMM_INIT(pvmm_team_options);
  pvmm_window_options wopts = PVMM_INIT(pvmm_window_options);
  pvmm_bootstrap_ops ops;

  memset(&fabric, 0, sizeof fabric);
  CHECK(pvmm_c_api_version() == PVMM_C_API_VERSION);
  CHECK(strcmp(pvmm_status_name(pvmm_status_ok), "ok") == 0);
  CHECK(strcmp(pvmm_status_name(pvmm_status_overlapping_mapping), "overlapping_mapping") == 0);
  CHECK(strcmp(pvmm_status_name(12345), "unknown") == 0);
  CHECK(pvmm_status_version_mismatch == 30 && pvmm_status_invalid_argument == 1);
  CHECK(pvmm_last_error_code() == pvmm_status_ok);
  CHECK(strcmp(pvmm_last_error_message(), "") == 0);

  /* devices */
  CHECK_STATUS(pvmm_query_backend(NULL), pvmm_status_invalid_argument, "info is NULL");
  backend.struct_size = 3;
  CHECK_STATUS(pvmm_query_backend(&backend), pvmm_status_version_mismatch, "struct_size is 3");
  CHECK_STATUS(pvmm_device_count(NULL), pvmm_status_invalid_argument, "count is NULL");
  CHECK_STATUS(pvmm_query_device(0, NULL), pvmm_status_invalid_argument, "info is NULL");
  { /* what follows needs a device (CI builds the GPU backends where there is none) */
    pvmm_backend_info here = PVMM_INIT(pvmm_backend_info);
    int devices = 0;
    if (pvmm_query_backend(&here) != pvmm_status_ok || !here.available ||
        pvmm_device_count(&devices) != pvmm_status_ok || devices < 1) {
      printf("[pvmm-skip] the rest needs a device: the %s backend has none here: %s\n", here.name,
             here.unavailable_reason);
      return check_summary("c_api/bad_input");
    }
  }
  CHECK_STATUS(pvmm_query_device(-1, &device), pvmm_status_invalid_device, "device -1 does not exist");
  CHECK_STATUS(pvmm_query_device(1 << 20, &device), pvmm_status_invalid_device, "");
  device.struct_size = 0;
  CHECK_STATUS(pvmm_query_device(0, &device), pvmm_status_version_mismatch, "PVMM_INIT(pvmm_device_info)");
  CHECK_STATUS(pvmm_query_granularity(NULL, &gran, NULL), pvmm_status_invalid_argument, "properties is NULL");
  CHECK_STATUS(pvmm_query_granularity(&props, NULL, NULL), pvmm_status_invalid_argument, "minimum is NULL");
  CHECK_STATUS(pvmm_query_granularity(&bad_props, &gran, NULL), pvmm_status_version_mismatch, "struct_size");
  props.location.kind = 5;
  CHECK_STATUS(pvmm_query_granularity(&props, &gran, NULL), pvmm_status_invalid_location, "location kind 5");
  props.location.kind = pvmm_location_device;
  props.exportable = 0x80;
  CHECK_STATUS(pvmm_query_granularity(&props, &gran, NULL), pvmm_status_invalid_argument, "pvmm_handle_");
  props.exportable = pvmm_handle_posix_fd;
  CHECK_STATUS(pvmm_reservation_granularity(NULL), pvmm_status_invalid_argument, "granularity is NULL");
  CHECK_STATUS(pvmm_can_access_peer(0, 0, NULL), pvmm_status_invalid_argument, "can_access is NULL");
  CHECK_STATUS(pvmm_can_access_peer(-3, 0, &value), pvmm_status_invalid_device, "");
  CHECK_OK(pvmm_query_granularity(&props, &gran, NULL));
  {
    size_t free_bytes = 0, total_bytes = 0;
    CHECK_STATUS(pvmm_query_memory(0, NULL, &total_bytes, NULL), pvmm_status_invalid_argument, "free_bytes is NULL");
    CHECK_STATUS(pvmm_query_memory(0, &free_bytes, NULL, NULL), pvmm_status_invalid_argument, "total_bytes is NULL");
    CHECK_STATUS(pvmm_query_memory(-1, &free_bytes, &total_bytes, NULL), pvmm_status_invalid_device, "");
    CHECK(free_bytes == 0 && total_bytes == 0); /* untouched on failure */
  }

  /* allocations */
  CHECK_STATUS(pvmm_allocation_create(gran, &props, NULL), pvmm_status_invalid_argument, "out is NULL");
  CHECK_STATUS(pvmm_allocation_create(gran, NULL, &out_alloc), pvmm_status_invalid_argument, "properties is NULL");
  CHECK_STATUS(pvmm_allocation_create(0, &props, &out_alloc), pvmm_status_invalid_size, "");
  CHECK_STATUS(pvmm_allocation_create(gran + 1, &props, &out_alloc), pvmm_status_unaligned, "");
  CHECK_STATUS(pvmm_allocation_create(SIZE_MAX - gran + 1, &props, &out_alloc), pvmm_status_out_of_memory, "");
  CHECK(out_alloc.id == 0); /* untouched on failure */
  CHECK_OK(pvmm_allocation_create(gran, &props, &alloc));
  CHECK_OK(pvmm_allocation_create(gran, &props, &dead_alloc));
  CHECK_OK(pvmm_allocation_release(dead_alloc));
  CHECK_STATUS(pvmm_allocation_release(dead_alloc), pvmm_status_already_released, freed); /* double free */
  CHECK_STATUS(pvmm_allocation_release(null_alloc), pvmm_status_invalid_handle, null_handle);
  CHECK_STATUS(pvmm_allocation_release(foreign_alloc), pvmm_status_invalid_handle, foreign);
  CHECK_STATUS(pvmm_allocation_size(dead_alloc, &size), pvmm_status_already_released, freed);
  CHECK_STATUS(pvmm_allocation_size(alloc, NULL), pvmm_status_invalid_argument, "size is NULL");
  CHECK_STATUS(pvmm_allocation_retain(NULL, &out_alloc), pvmm_status_not_mapped, "no pvmm mapping");
  CHECK_STATUS(pvmm_allocation_retain(&value, &out_alloc), pvmm_status_not_mapped, "");
  CHECK_STATUS(pvmm_allocation_retain(&value, NULL), pvmm_status_invalid_argument, "out is NULL");
  CHECK_STATUS(pvmm_allocation_export_posix_fd(alloc, NULL), pvmm_status_invalid_argument, "fd is NULL");
  CHECK_STATUS(pvmm_allocation_export_posix_fd(dead_alloc, &fd), pvmm_status_already_released, freed);
  CHECK_STATUS(pvmm_allocation_export_fabric(alloc, NULL), pvmm_status_invalid_argument, "handle is NULL");
  CHECK_STATUS(pvmm_allocation_export_fabric(foreign_alloc, &fabric), pvmm_status_invalid_handle, foreign);
  CHECK_STATUS(pvmm_allocation_import_posix_fd(-1, gran, &out_alloc), pvmm_status_invalid_handle, "");
  CHECK_STATUS(pvmm_allocation_import_posix_fd(0, gran, NULL), pvmm_status_invalid_argument, "out is NULL");
  CHECK_STATUS(pvmm_allocation_import_fabric(NULL, gran, &out_alloc), pvmm_status_invalid_argument, "NULL");
  CHECK_STATUS(pvmm_allocation_import_fabric(&fabric, gran, NULL), pvmm_status_invalid_argument, "out is NULL");

  /* reservations */
  CHECK_OK(pvmm_reservation_granularity(&gran));
  CHECK_STATUS(pvmm_reservation_create(gran, 0, NULL, NULL), pvmm_status_invalid_argument, "out is NULL");
  CHECK_STATUS(pvmm_reservation_create(0, 0, NULL, &out_res), pvmm_status_invalid_size, "");
  CHECK_STATUS(pvmm_reservation_create(gran, 3, NULL, &out_res), pvmm_status_invalid_alignment, "");
  CHECK_OK(pvmm_reservation_create(2 * gran, 0, NULL, &res));
  CHECK_OK(pvmm_reservation_create(gran, 0, NULL, &dead_res));
  CHECK_OK(pvmm_reservation_release(dead_res));
  CHECK_STATUS(pvmm_reservation_release(dead_res), pvmm_status_already_released, freed);
  reservation_as_alloc.id = res.id;
  CHECK_STATUS(pvmm_allocation_size(reservation_as_alloc, &size), pvmm_status_invalid_handle,
               "a pvmm_reservation handle where a pvmm_allocation handle belongs");
  CHECK_STATUS(pvmm_reservation_address(res, NULL), pvmm_status_invalid_argument, "address is NULL");
  CHECK_STATUS(pvmm_reservation_address(dead_res, &address), pvmm_status_already_released, freed);
  CHECK_STATUS(pvmm_reservation_size(res, NULL), pvmm_status_invalid_argument, "size is NULL");
  CHECK_STATUS(pvmm_reservation_map(dead_res, 0, alloc, 0, gran, &address), pvmm_status_already_released, freed);
  CHECK_STATUS(pvmm_reservation_map(res, 0, dead_alloc, 0, gran, &address), pvmm_status_already_released, freed);
  CHECK_STATUS(pvmm_reservation_map(res, 0, alloc, 0, 0, &address), pvmm_status_invalid_size, "");
  CHECK_STATUS(pvmm_reservation_map(res, 2 * gran, alloc, 0, gran, &address), pvmm_status_out_of_range, "");
  CHECK_OK(pvmm_reservation_map(res, 0, alloc, 0, gran, &address));
  CHECK_STATUS(pvmm_reservation_map(res, 0, alloc, 0, gran, NULL), pvmm_status_overlapping_mapping, "");
  CHECK_STATUS(pvmm_reservation_release(res), pvmm_status_busy, ""); /* mappings remain: the handle stays */
  CHECK_STATUS(pvmm_reservation_set_access(res, 0, gran, NULL, 1), pvmm_status_invalid_argument, "grants is NULL");
  CHECK_STATUS(pvmm_reservation_set_access(res, 0, gran, &bad_grant, 1), pvmm_status_invalid_location, "kind 7");
  CHECK_STATUS(pvmm_reservation_set_access(res, 0, gran, &bad_access, 1), pvmm_status_invalid_argument, "access 9");
  CHECK_STATUS(pvmm_reservation_set_access(res, gran, gran, &grant, 1), pvmm_status_not_mapped, "");
  CHECK_STATUS(pvmm_reservation_set_access(dead_res, 0, gran, &grant, 1), pvmm_status_already_released, freed);
  CHECK_STATUS(pvmm_query_access(grant.location, address, NULL), pvmm_status_invalid_argument, "access is NULL");
  CHECK_STATUS(pvmm_query_access(bad_location, address, &value), pvmm_status_invalid_location, "kind 9");
  CHECK_STATUS(pvmm_query_access(grant.location, NULL, &value), pvmm_status_not_mapped, "no pvmm mapping");
  CHECK_STATUS(pvmm_reservation_unmap(res, gran, gran), pvmm_status_not_mapped, "");
  CHECK_STATUS(pvmm_reservation_unmap(dead_res, 0, gran), pvmm_status_already_released, freed);
  CHECK_OK(pvmm_reservation_unmap(res, 0, gran));
  CHECK_OK(pvmm_reservation_release(res));
  CHECK_OK(pvmm_allocation_release(alloc));

  /* dma-buf export */
  {
    pvmm_dmabuf_piece piece;
    size_t count = 0;
    CHECK_STATUS(pvmm_export_dmabuf(&value, 4096, &piece, 1, NULL), pvmm_status_invalid_argument, "count is NULL");
    CHECK_STATUS(pvmm_export_dmabuf(&value, 4096, NULL, 1, &count), pvmm_status_invalid_argument, "pieces is NULL");
    CHECK_STATUS(pvmm_export_dmabuf(NULL, 4096, &piece, 1, &count), pvmm_status_invalid_argument, "address is null");
    CHECK_STATUS(pvmm_export_dmabuf((void*)4096, 0, &piece, 1, &count), pvmm_status_invalid_size, "size is zero");
    CHECK_STATUS(pvmm_export_dmabuf((char*)4096 + 1, 4096, &piece, 1, &count), pvmm_status_unaligned, "page size");
    CHECK_STATUS(pvmm_export_dmabuf((void*)4096, 4096, &piece, 1, &count), pvmm_status_not_mapped,
                 "no pvmm reservation holds");
  }

  /* copies */
  CHECK_STATUS(pvmm_copy_to_mapping(NULL, &value, 4, -1), pvmm_status_not_mapped, "no pvmm mapping");
  CHECK_STATUS(pvmm_copy_from_mapping(&value, NULL, 4, -1), pvmm_status_not_mapped, "no pvmm mapping");

  /* descriptors */
  {
    uint8_t bytes[64] = {0};
    int fds[2] = {-1, -1};
    size_t length = 0, count = 0;
    pvmm_imported imported = {0};
    CHECK_STATUS(pvmm_growable_export(grow, 1, bytes, 64, NULL, fds, 2, &count), pvmm_status_invalid_argument,
                 "length is NULL");
    CHECK_STATUS(pvmm_growable_export(grow, 1, bytes, 64, &length, fds, 2, NULL), pvmm_status_invalid_argument,
                 "fd_count is NULL");
    CHECK_STATUS(pvmm_growable_export(grow, 1, NULL, 64, &length, fds, 2, &count), pvmm_status_invalid_argument,
                 "bytes is NULL");
    CHECK_STATUS(pvmm_growable_export(grow, 1, bytes, 64, &length, NULL, 2, &count), pvmm_status_invalid_argument,
                 "fds is NULL");
    CHECK_STATUS(pvmm_growable_export(grow, 3, bytes, 64, &length, fds, 2, &count), pvmm_status_invalid_argument,
                 "kind 3");
    CHECK_STATUS(pvmm_growable_export(grow, 1, bytes, 64, &length, fds, 2, &count), pvmm_status_invalid_handle,
                 null_handle);
    CHECK_STATUS(pvmm_import_buffer(NULL, 64, fds, 0, NULL, 0, &imported), pvmm_status_invalid_argument,
                 "bytes is NULL");
    CHECK_STATUS(pvmm_import_buffer(bytes, 64, fds, 0, NULL, 0, NULL), pvmm_status_invalid_argument, "out is NULL");
    CHECK_STATUS(pvmm_import_buffer(bytes, 64, NULL, 2, NULL, 0, &imported), pvmm_status_invalid_argument,
                 "fds is NULL");
    CHECK_STATUS(pvmm_import_buffer(bytes, 64, fds, 0, NULL, 1, &imported), pvmm_status_invalid_argument,
                 "grants is NULL");
    CHECK_STATUS(pvmm_import_buffer(bytes, 64, fds, 0, &grant, 1, &imported), pvmm_status_protocol_error, "");
    CHECK_STATUS(pvmm_import_buffer(bytes, 0, fds, 0, &grant, 1, &imported), pvmm_status_protocol_error, "");
    CHECK(imported.id == 0);
    CHECK_STATUS(pvmm_imported_data(imported, NULL, NULL), pvmm_status_invalid_argument, "data is NULL");
    CHECK_STATUS(pvmm_imported_data(imported, &address, NULL), pvmm_status_invalid_handle, null_handle);
    CHECK_STATUS(pvmm_imported_release(imported), pvmm_status_invalid_handle, null_handle);
  }

  /* the fd transport */
  {
    pvmm_listener listener = {0};
    pvmm_connection connection = {0};
    int fds[1];
    size_t n = 0, bytes = 0;
    char name[64];
    snprintf(name, sizeof name, "pvmm-c-api-bad-%ld", (long)getpid());
    CHECK_STATUS(pvmm_listen(NULL, &listener), pvmm_status_invalid_argument, "name is NULL");
    CHECK_STATUS(pvmm_listen(name, NULL), pvmm_status_invalid_argument, "out is NULL");
    CHECK_STATUS(pvmm_listen("", &listener), pvmm_status_invalid_argument, "");
    CHECK_STATUS(pvmm_listener_accept(listener, 0, &connection), pvmm_status_invalid_handle, null_handle);
    CHECK_STATUS(pvmm_listener_release(listener), pvmm_status_invalid_handle, null_handle);
    CHECK_STATUS(pvmm_connect(NULL, 0, &connection), pvmm_status_invalid_argument, "name is NULL");
    CHECK_STATUS(pvmm_connect(name, 0, NULL), pvmm_status_invalid_argument, "out is NULL");
    CHECK_STATUS(pvmm_connect(name, 0, &connection), pvmm_status_timeout, "");
    CHECK_STATUS(pvmm_connection_release(connection), pvmm_status_invalid_handle, null_handle);
    CHECK_STATUS(pvmm_connection_send(connection, NULL, 1, "x", 1, 0), pvmm_status_invalid_argument, "fds is NULL");
    CHECK_STATUS(pvmm_connection_send(connection, NULL, 0, NULL, 1, 0), pvmm_status_invalid_argument,
                 "payload is NULL");
    CHECK_STATUS(pvmm_connection_send(connection, NULL, 0, "x", 1, 0), pvmm_status_invalid_handle, null_handle);
    CHECK_STATUS(pvmm_connection_receive(connection, fds, 1, NULL, name, 1, &bytes, 0), pvmm_status_invalid_argument,
                 "fd_count is NULL");
    CHECK_STATUS(pvmm_connection_receive(connection, NULL, 1, &n, name, 1, &bytes, 0), pvmm_status_invalid_argument,
                 "fds is NULL");
    CHECK_STATUS(pvmm_connection_receive(connection, fds, 1, &n, name, 1, &bytes, 0), pvmm_status_invalid_handle,
                 null_handle);
    CHECK_OK(pvmm_listen(name, &listener));
    CHECK_STATUS(pvmm_listener_accept(listener, 0, &connection), pvmm_status_timeout, "");
    CHECK_OK(pvmm_listener_release(listener));
    CHECK_STATUS(pvmm_listener_release(listener), pvmm_status_already_released, freed);
  }

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
    CHECK_STATUS(pvmm_stream_release(stream), pvmm_status_invalid_handle, null_handle);
    CHECK_STATUS(pvmm_stream_native(stream, &ref), pvmm_status_invalid_handle, null_handle);
    CHECK_STATUS(pvmm_stream_native(stream, NULL), pvmm_status_invalid_argument, "ref is NULL");
    CHECK_STATUS(pvmm_event_create(0, NULL), pvmm_status_invalid_argument, "out is NULL");
    CHECK_STATUS(pvmm_event_create(-1, &event), pvmm_status_invalid_device, "");
    CHECK_STATUS(pvmm_event_release(event), pvmm_status_invalid_handle, null_handle);
    CHECK_STATUS(pvmm_event_record(event, ref), pvmm_status_invalid_handle, null_handle);
    CHECK_STATUS(pvmm_event_synchronize(event), pvmm_status_invalid_handle, null_handle);
    CHECK_STATUS(pvmm_stream_wait_event(ref, event), pvmm_status_invalid_handle, null_handle);
    CHECK_STATUS(pvmm_event_native(event, &a), pvmm_status_invalid_handle, null_handle);
    CHECK_STATUS(pvmm_event_native(event, NULL), pvmm_status_invalid_argument, "native is NULL");
    CHECK_STATUS(pvmm_event_query(event, &value), pvmm_status_invalid_handle, null_handle);
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
    CHECK_STATUS(pvmm_pool_release(pool), pvmm_status_invalid_handle, null_handle);
    CHECK_STATUS(pvmm_pool_allocate_async(pool, 64, ref, &address), pvmm_status_invalid_handle, null_handle);
    CHECK_STATUS(pvmm_pool_allocate_async(pool, 64, ref, NULL), pvmm_status_invalid_argument, "pointer is NULL");
    CHECK_STATUS(pvmm_pool_free_async(pool, &value, ref), pvmm_status_invalid_handle, null_handle);
    CHECK_STATUS(pvmm_pool_trim_to(pool, 0), pvmm_status_invalid_handle, null_handle);
    CHECK_STATUS(pvmm_pool_usage(pool, &a, &b), pvmm_status_invalid_handle, null_handle);
    CHECK_STATUS(pvmm_pool_usage(pool, NULL, &b), pvmm_status_invalid_argument, "reserved is NULL");
    CHECK_STATUS(pvmm_pool_set_release_threshold(pool, 0), pvmm_status_invalid_handle, null_handle);
    CHECK_STATUS(pvmm_pool_release_threshold(pool, &a), pvmm_status_invalid_handle, null_handle);
    CHECK_STATUS(pvmm_pool_release_threshold(pool, NULL), pvmm_status_invalid_argument, "bytes is NULL");
    {
      pvmm_access_descriptor rw = {{pvmm_location_device, 0}, pvmm_access_read_write};
      CHECK_STATUS(pvmm_pool_set_access(pool, &rw, 1), pvmm_status_invalid_handle, null_handle);
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
    CHECK_STATUS(pvmm_event_native(event, &a), pvmm_status_already_released, freed);
    CHECK_STATUS(pvmm_event_query(event, &value), pvmm_status_already_released, freed);
    CHECK_STATUS(pvmm_event_release(event), pvmm_status_already_released, freed); /* double free */

    /* pool sharing: NULL, a pool that is not exportable or not imported, a forged record, foreign handles */
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
      CHECK_STATUS(pvmm_pool_allocation_data(held, &address, NULL), pvmm_status_invalid_handle, null_handle);
      CHECK_STATUS(pvmm_pool_allocation_data(held, NULL, NULL), pvmm_status_invalid_argument, "data is NULL");
      CHECK_STATUS(pvmm_pool_allocation_free_async(held, ref), pvmm_status_invalid_handle, null_handle);
      CHECK_STATUS(pvmm_pool_allocation_release(held), pvmm_status_invalid_handle, null_handle);
      pool_as_allocation.id = pool.id;
      CHECK_STATUS(pvmm_pool_allocation_release(pool_as_allocation), pvmm_status_invalid_handle,
                   "a pvmm_pool handle where a pvmm_pool_allocation handle belongs");
    }
    CHECK_OK(pvmm_stream_release(stream));
    CHECK_OK(pvmm_pool_release(pool));
    CHECK_STATUS(pvmm_pool_trim_to(pool, 0), pvmm_status_already_released, freed);
    CHECK_STATUS(pvmm_pool_export_posix_fd(pool, &value, NULL), pvmm_status_invalid_argument, "id is NULL");
    {
      pvmm_pool_id id;
      pvmm_pool_pointer_export record;
      pvmm_pool_allocation held = {0};
      CHECK_STATUS(pvmm_pool_export_posix_fd(pool, &value, &id), pvmm_status_already_released, freed);
      CHECK_STATUS(pvmm_pool_export_pointer(pool, &value, &record), pvmm_status_already_released, freed);
      memset(&record, 0, sizeof record);
      CHECK_STATUS(pvmm_pool_import_pointer(pool, &record, ref, &held), pvmm_status_already_released, freed);
      CHECK_STATUS(pvmm_pool_set_access(pool, NULL, 0), pvmm_status_already_released, freed);
    }
  }

  /* growable, pinned, managed, pointer */
  CHECK_STATUS(pvmm_growable_create(NULL, &grow), pvmm_status_invalid_argument, "options is NULL");
  CHECK_STATUS(pvmm_growable_create(&gopts, NULL), pvmm_status_invalid_argument, "out is NULL");
  gopts.struct_size = 1;
  CHECK_STATUS(pvmm_growable_create(&gopts, &grow), pvmm_status_version_mismatch, "pvmm_growable_options");
  gopts.struct_size = sizeof gopts;
  gopts.properties.struct_size = 1; /* PVMM_INIT set the nested one too */
  CHECK_STATUS(pvmm_growable_create(&gopts, &grow), pvmm_status_version_mismatch, "pvmm_allocation_properties");
  gopts.properties = props;
  gopts.access_count = 1;
  CHECK_STATUS(pvmm_growable_create(&gopts, &grow), pvmm_status_invalid_argument, "grants is NULL");
  gopts.access_count = 0;
  CHECK_STATUS(pvmm_growable_create(&gopts, &grow), pvmm_status_invalid_argument, "");
  CHECK(grow.id == 0);
  CHECK_STATUS(pvmm_growable_release(grow), pvmm_status_invalid_handle, null_handle);
  CHECK_STATUS(pvmm_growable_resize(grow, 1, NULL), pvmm_status_invalid_handle, null_handle);
  CHECK_STATUS(pvmm_growable_data(grow, NULL, NULL), pvmm_status_invalid_argument, "data is NULL");
  CHECK_STATUS(pvmm_growable_data(grow, &address, NULL), pvmm_status_invalid_handle, null_handle);
  CHECK_STATUS(pvmm_pinned_create(4096, NULL, NULL), pvmm_status_invalid_argument, "out is NULL");
  CHECK_STATUS(pvmm_pinned_create(0, NULL, &pin), pvmm_status_invalid_size, "");
  CHECK_STATUS(pvmm_pinned_create(4096, &bad_pinned, &pin), pvmm_status_version_mismatch, "pvmm_pinned_options");
  CHECK_STATUS(pvmm_pinned_release(pin), pvmm_status_invalid_handle, null_handle);
  CHECK_STATUS(pvmm_pinned_data(pin, &address, NULL), pvmm_status_invalid_handle, null_handle);
  CHECK_STATUS(pvmm_pinned_data(pin, NULL, NULL), pvmm_status_invalid_argument, "data is NULL");
  CHECK_STATUS(pvmm_register_host_memory(NULL, 4096, NULL), pvmm_status_invalid_argument, "");
  CHECK_STATUS(pvmm_register_host_memory(&value, 4096, &bad_pinned), pvmm_status_version_mismatch, "");
  CHECK_STATUS(pvmm_unregister_host_memory(&value), pvmm_status_not_registered, "");
  CHECK_STATUS(pvmm_managed_create(4096, 7, &man), pvmm_status_invalid_argument, "attach_mode 7");
  CHECK_STATUS(pvmm_managed_create(4096, pvmm_attach_global, NULL), pvmm_status_invalid_argument, "out is NULL");
  CHECK_STATUS(pvmm_managed_create(0, pvmm_attach_global, &man), pvmm_status_invalid_size, "");
  CHECK_STATUS(pvmm_managed_release(man), pvmm_status_invalid_handle, null_handle);
  CHECK_STATUS(pvmm_managed_data(man, &address, NULL), pvmm_status_invalid_handle, null_handle);
  CHECK_STATUS(pvmm_managed_data(man, NULL, NULL), pvmm_status_invalid_argument, "data is NULL");
  CHECK_STATUS(pvmm_managed_advise(&value, 4096, 6, NULL), pvmm_status_invalid_argument, "advice 6");
  CHECK_STATUS(pvmm_managed_advise(&value, 4096, -1, NULL), pvmm_status_invalid_argument, "not a pvmm_advice");
  CHECK_STATUS(pvmm_managed_advise(&value, 4096, pvmm_advice_set_accessed_by, &bad_location),
               pvmm_status_invalid_location, "kind 9");
  {
    pvmm_stream_ref nowhere = {0, 0};
    pvmm_location device0 = {pvmm_location_device, 0};
    CHECK_STATUS(pvmm_managed_prefetch_async(&value, 4096, bad_location, nowhere), pvmm_status_invalid_location,
                 "kind 9");
    CHECK_STATUS(pvmm_managed_prefetch_async(&value, 4096, device0, nowhere), pvmm_status_invalid_argument,
                 "not in a managed allocation");
  }
  CHECK_STATUS(pvmm_query_pointer(&value, NULL), pvmm_status_invalid_argument, "attributes is NULL");
  CHECK_STATUS(pvmm_query_pointer(NULL, &attrs), pvmm_status_invalid_argument, "");
  attrs.struct_size = 2 * sizeof attrs;
  CHECK_STATUS(pvmm_query_pointer(&value, &attrs), pvmm_status_version_mismatch, "pvmm_pointer_attributes");

  /* bootstraps: NULL, the wrong version, missing callbacks, bad ranks */
  memset(&ops, 0, sizeof ops);
  ops.version = PVMM_BOOTSTRAP_OPS_VERSION + 1;
  ops.struct_size = sizeof ops;
  ops.size = 1;
  ops.local_size = 1;
  ops.allgather = dummy_allgather;
  ops.abort = dummy_abort;
  CHECK_STATUS(pvmm_bootstrap_create(NULL, &boot), pvmm_status_invalid_argument, "ops is NULL");
  CHECK_STATUS(pvmm_bootstrap_create(&ops, NULL), pvmm_status_invalid_argument, "out is NULL");
  CHECK_STATUS(pvmm_bootstrap_create(&ops, &boot), pvmm_status_version_mismatch, "has version 2");
  ops.version = PVMM_BOOTSTRAP_OPS_VERSION;
  ops.struct_size = 8;
  CHECK_STATUS(pvmm_bootstrap_create(&ops, &boot), pvmm_status_version_mismatch, "struct_size 8");
  ops.struct_size = sizeof ops;
  ops.allgather = NULL;
  CHECK_STATUS(pvmm_bootstrap_create(&ops, &boot), pvmm_status_invalid_argument, ".allgather and .abort");
  ops.allgather = dummy_allgather;
  ops.rank = 1;
  CHECK_STATUS(pvmm_bootstrap_create(&ops, &boot), pvmm_status_invalid_argument, "rank 1 of size 1");
  ops.rank = 0;
  ops.size = 0;
  CHECK_STATUS(pvmm_bootstrap_create(&ops, &boot), pvmm_status_invalid_argument, "size");
  CHECK(boot.id == 0);
  CHECK_STATUS(pvmm_bootstrap_create_threads(0, &boot), pvmm_status_invalid_argument, "");
  CHECK_STATUS(pvmm_bootstrap_create_threads(2, NULL), pvmm_status_invalid_argument, "out is NULL");
  CHECK_STATUS(pvmm_bootstrap_create_endpoints(NULL, 0, 1, 100, &boot), pvmm_status_invalid_argument, "name");
  CHECK_STATUS(pvmm_bootstrap_create_endpoints("x", 0, 1, 100, NULL), pvmm_status_invalid_argument, "out is NULL");
  CHECK_STATUS(pvmm_bootstrap_create_endpoints("x", 2, 1, 100, &boot), pvmm_status_invalid_argument, "");
  CHECK_STATUS(pvmm_bootstrap_release(boot), pvmm_status_invalid_handle, null_handle);
  CHECK_STATUS(pvmm_bootstrap_rank(boot, &value, NULL), pvmm_status_invalid_handle, null_handle);
  CHECK_STATUS(pvmm_bootstrap_allgather(boot, &value, 4, &value, INT64_MAX), pvmm_status_invalid_handle, "");
  CHECK_STATUS(pvmm_bootstrap_barrier(boot, INT64_MAX), pvmm_status_invalid_handle, null_handle);
  CHECK_STATUS(pvmm_bootstrap_send(boot, 0, 0, &value, 4, INT64_MAX), pvmm_status_invalid_handle, null_handle);
  CHECK_STATUS(pvmm_bootstrap_receive(boot, 0, 0, &value, 4, INT64_MAX), pvmm_status_invalid_handle, null_handle);
  CHECK_STATUS(pvmm_bootstrap_abort(boot), pvmm_status_invalid_handle, null_handle);
  /* A valid one-rank C bootstrap: the base class's checks apply to it. */
  ops.size = 1;
  CHECK_OK(pvmm_bootstrap_create(&ops, &boot));
  CHECK_STATUS(pvmm_bootstrap_allgather(boot, NULL, 4, &value, INT64_MAX), pvmm_status_invalid_argument, "");
  /* the base class's check, before the (absent) send callback */
  CHECK_STATUS(pvmm_bootstrap_send(boot, 0, 0, &value, 4, INT64_MAX), pvmm_status_invalid_argument,
               "a rank does not send to itself");
  CHECK_OK(pvmm_bootstrap_allgather(boot, &value, 4, &value, INT64_MAX));

  /* teams and windows */
  CHECK_STATUS(pvmm_team_create(boot, NULL, &team), pvmm_status_invalid_argument, "options is NULL");
  CHECK_STATUS(pvmm_team_create(boot, &topts, NULL), pvmm_status_invalid_argument, "out is NULL");
  topts.struct_size = 4;
  CHECK_STATUS(pvmm_team_create(boot, &topts, &team), pvmm_status_version_mismatch, "pvmm_team_options");
  topts.struct_size = sizeof topts;
  topts.timeout_ms = -2; /* -1 is PVMM_WAIT_FOREVER */
  CHECK_STATUS(pvmm_team_create(boot, &topts, &team), pvmm_status_invalid_argument,
               "pvmm_team_options.timeout_ms = -2 ms is negative");
  topts.timeout_ms = 0;
  {
    pvmm_bootstrap reservation_as_bootstrap;
    reservation_as_bootstrap.id = dead_res.id;
    CHECK_STATUS(pvmm_team_create(reservation_as_bootstrap, &topts, &team), pvmm_status_invalid_handle,
                 "a pvmm_reservation handle where a pvmm_bootstrap handle belongs");
  }
  CHECK_STATUS(pvmm_team_release(team), pvmm_status_invalid_handle, null_handle);
  CHECK_STATUS(pvmm_team_abort(team), pvmm_status_invalid_handle, null_handle);
  CHECK_STATUS(pvmm_team_info(team, &value, NULL, NULL, NULL), pvmm_status_invalid_handle, null_handle);
  CHECK_STATUS(pvmm_window_create(team, NULL, &win), pvmm_status_invalid_argument, "options is NULL");
  CHECK_STATUS(pvmm_window_create(team, &wopts, NULL), pvmm_status_invalid_argument, "out is NULL");
  wopts.struct_size = 0;
  CHECK_STATUS(pvmm_window_create(team, &wopts, &win), pvmm_status_version_mismatch, "pvmm_window_options");
  wopts.struct_size = sizeof wopts;
  CHECK_STATUS(pvmm_window_create(team, &wopts, &win), pvmm_status_invalid_handle, null_handle);
  CHECK_STATUS(pvmm_window_release(win), pvmm_status_invalid_handle, null_handle);
  CHECK_STATUS(pvmm_window_grow(win, 4096, 0), pvmm_status_invalid_handle, null_handle);
  CHECK_STATUS(pvmm_window_base(win, NULL, NULL), pvmm_status_invalid_argument, "base is NULL");
  CHECK_STATUS(pvmm_window_base(win, &address, NULL), pvmm_status_invalid_handle, null_handle);
  CHECK_STATUS(pvmm_window_peer(win, 0, NULL, NULL), pvmm_status_invalid_argument, "address is NULL");
  CHECK_STATUS(pvmm_window_peer(win, 0, &address, NULL), pvmm_status_invalid_handle, null_handle);
  {
    pvmm_stream_ref nowhere = {0, 0};
    void* const* table = NULL;
    CHECK_STATUS(pvmm_window_put_signal(win, 1, 0, nowhere), pvmm_status_invalid_handle, null_handle);
    CHECK_STATUS(pvmm_window_wait_signal(win, 1, 0, nowhere, 10), pvmm_status_invalid_handle, null_handle);
    CHECK_STATUS(pvmm_window_barrier(win, 0, nowhere, 10), pvmm_status_invalid_handle, null_handle);
    CHECK_STATUS(pvmm_window_signal_status(win), pvmm_status_invalid_handle, null_handle);
    CHECK_STATUS(pvmm_window_device_pointer_table(win, NULL), pvmm_status_invalid_argument, "table is NULL");
    CHECK_STATUS(pvmm_window_device_pointer_table(win, &table), pvmm_status_invalid_handle, null_handle);
  }
  CHECK_OK(pvmm_bootstrap_release(boot));
  CHECK_STATUS(pvmm_bootstrap_release(boot), pvmm_status_already_released, freed);

  /* the last error's parts */
  CHECK_STATUS(pvmm_reservation_create(0, 0, NULL, &out_res), pvmm_status_invalid_size, "");
  CHECK(pvmm_last_error_code() == pvmm_status_invalid_size);
  CHECK(strstr(pvmm_last_error_operation(), "reserve") != NULL);
  CHECK(strlen(pvmm_last_error_arguments()) > 0);
  CHECK(pvmm_last_error_native_name() != NULL && pvmm_last_error_hint() != NULL && pvmm_last_error_detail() != NULL);
  CHECK(pvmm_last_error_native_code() == 0);
  pvmm_clear_last_error();
  CHECK(pvmm_last_error_code() == pvmm_status_ok && strcmp(pvmm_last_error_message(), "") == 0);
  return check_summary("c_api/bad_input");
}
