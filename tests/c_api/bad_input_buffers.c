/* Bad input to pvmm's C interface, buffers: descriptors, the fd transport, growable, pinned and managed memory,
 * the pointer query: a specific status and message, never a crash (bad_input.h). Plain C11. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <unistd.h>

#include "bad_input.h"

int main(void) {
  pvmm_allocation_properties props = PVMM_INIT(pvmm_allocation_properties);
  pvmm_access_descriptor grant = {{pvmm_location_device, 0}, pvmm_access_read_write};
  pvmm_location bad_location = {9, 0};
  pvmm_pointer_attributes attrs = PVMM_INIT(pvmm_pointer_attributes);
  pvmm_pinned_options bad_pinned = {1, 1, 1, 0};
  pvmm_growable_options gopts = PVMM_INIT(pvmm_growable_options);
  pvmm_growable grow = {0};
  pvmm_pinned pin = {0};
  pvmm_managed man = {0};
  void* address = NULL;
  int value = 0;

  if (!have_device()) return check_summary("c_api/bad_input_buffers");
  props.exportable = pvmm_handle_posix_fd;

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
                 NULL_HANDLE);
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
    CHECK_STATUS(pvmm_imported_data(imported, &address, NULL), pvmm_status_invalid_handle, NULL_HANDLE);
    CHECK_STATUS(pvmm_imported_release(imported), pvmm_status_invalid_handle, NULL_HANDLE);
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
    CHECK_STATUS(pvmm_listener_accept(listener, 0, &connection), pvmm_status_invalid_handle, NULL_HANDLE);
    CHECK_STATUS(pvmm_listener_release(listener), pvmm_status_invalid_handle, NULL_HANDLE);
    CHECK_STATUS(pvmm_connect(NULL, 0, &connection), pvmm_status_invalid_argument, "name is NULL");
    CHECK_STATUS(pvmm_connect(name, 0, NULL), pvmm_status_invalid_argument, "out is NULL");
    CHECK_STATUS(pvmm_connect(name, 0, &connection), pvmm_status_timeout, "");
    CHECK_STATUS(pvmm_connection_release(connection), pvmm_status_invalid_handle, NULL_HANDLE);
    CHECK_STATUS(pvmm_connection_send(connection, NULL, 1, "x", 1, 0), pvmm_status_invalid_argument, "fds is NULL");
    CHECK_STATUS(pvmm_connection_send(connection, NULL, 0, NULL, 1, 0), pvmm_status_invalid_argument,
                 "payload is NULL");
    CHECK_STATUS(pvmm_connection_send(connection, NULL, 0, "x", 1, 0), pvmm_status_invalid_handle, NULL_HANDLE);
    CHECK_STATUS(pvmm_connection_receive(connection, fds, 1, NULL, name, 1, &bytes, 0), pvmm_status_invalid_argument,
                 "fd_count is NULL");
    CHECK_STATUS(pvmm_connection_receive(connection, NULL, 1, &n, name, 1, &bytes, 0), pvmm_status_invalid_argument,
                 "fds is NULL");
    CHECK_STATUS(pvmm_connection_receive(connection, fds, 1, &n, name, 1, &bytes, 0), pvmm_status_invalid_handle,
                 NULL_HANDLE);
    CHECK_OK(pvmm_listen(name, &listener));
    CHECK_STATUS(pvmm_listener_accept(listener, 0, &connection), pvmm_status_timeout, "");
    CHECK_OK(pvmm_listener_release(listener));
    CHECK_STATUS(pvmm_listener_release(listener), pvmm_status_already_released, FREED);
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
  CHECK_STATUS(pvmm_growable_release(grow), pvmm_status_invalid_handle, NULL_HANDLE);
  CHECK_STATUS(pvmm_growable_resize(grow, 1, NULL), pvmm_status_invalid_handle, NULL_HANDLE);
  CHECK_STATUS(pvmm_growable_data(grow, NULL, NULL), pvmm_status_invalid_argument, "data is NULL");
  CHECK_STATUS(pvmm_growable_data(grow, &address, NULL), pvmm_status_invalid_handle, NULL_HANDLE);
  CHECK_STATUS(pvmm_pinned_create(4096, NULL, NULL), pvmm_status_invalid_argument, "out is NULL");
  CHECK_STATUS(pvmm_pinned_create(0, NULL, &pin), pvmm_status_invalid_size, "");
  CHECK_STATUS(pvmm_pinned_create(4096, &bad_pinned, &pin), pvmm_status_version_mismatch, "pvmm_pinned_options");
  CHECK_STATUS(pvmm_pinned_release(pin), pvmm_status_invalid_handle, NULL_HANDLE);
  CHECK_STATUS(pvmm_pinned_data(pin, &address, NULL), pvmm_status_invalid_handle, NULL_HANDLE);
  CHECK_STATUS(pvmm_pinned_data(pin, NULL, NULL), pvmm_status_invalid_argument, "data is NULL");
  CHECK_STATUS(pvmm_register_host_memory(NULL, 4096, NULL), pvmm_status_invalid_argument, "");
  CHECK_STATUS(pvmm_register_host_memory(&value, 4096, &bad_pinned), pvmm_status_version_mismatch, "");
  CHECK_STATUS(pvmm_unregister_host_memory(&value), pvmm_status_not_registered, "");
  CHECK_STATUS(pvmm_managed_create(4096, 7, &man), pvmm_status_invalid_argument, "attach_mode 7");
  CHECK_STATUS(pvmm_managed_create(4096, pvmm_attach_global, NULL), pvmm_status_invalid_argument, "out is NULL");
  CHECK_STATUS(pvmm_managed_create(0, pvmm_attach_global, &man), pvmm_status_invalid_size, "");
  CHECK_STATUS(pvmm_managed_release(man), pvmm_status_invalid_handle, NULL_HANDLE);
  CHECK_STATUS(pvmm_managed_data(man, &address, NULL), pvmm_status_invalid_handle, NULL_HANDLE);
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
  return check_summary("c_api/bad_input_buffers");
}
