/* Bad input to pvmm's C interface, memory: the status names, devices, allocations, reservations, dma-buf export,
 * copies and the last error's parts: a specific status and message, never a crash (bad_input.h). Plain C11. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdlib.h>

#include "bad_input.h"

int main(void) {
  pvmm_allocation_properties props = PVMM_INIT(pvmm_allocation_properties);
  pvmm_allocation_properties bad_props = {sizeof(pvmm_allocation_properties) + 8, {0, 0}, 0, 0, 0};
  pvmm_allocation alloc = {0}, dead_alloc = {0}, out_alloc = {0};
  pvmm_reservation res = {0}, dead_res = {0}, out_res = {0};
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
  if (!have_device()) return check_summary("c_api/bad_input_vmm");
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
  CHECK_STATUS(pvmm_allocation_release(dead_alloc), pvmm_status_already_released, FREED); /* double free */
  CHECK_STATUS(pvmm_allocation_release(null_alloc), pvmm_status_invalid_handle, NULL_HANDLE);
  CHECK_STATUS(pvmm_allocation_release(foreign_alloc), pvmm_status_invalid_handle, FOREIGN);
  CHECK_STATUS(pvmm_allocation_size(dead_alloc, &size), pvmm_status_already_released, FREED);
  CHECK_STATUS(pvmm_allocation_size(alloc, NULL), pvmm_status_invalid_argument, "size is NULL");
  CHECK_STATUS(pvmm_allocation_retain(NULL, &out_alloc), pvmm_status_not_mapped, "no pvmm mapping");
  CHECK_STATUS(pvmm_allocation_retain(&value, &out_alloc), pvmm_status_not_mapped, "");
  CHECK_STATUS(pvmm_allocation_retain(&value, NULL), pvmm_status_invalid_argument, "out is NULL");
  CHECK_STATUS(pvmm_allocation_export_posix_fd(alloc, NULL), pvmm_status_invalid_argument, "fd is NULL");
  CHECK_STATUS(pvmm_allocation_export_posix_fd(dead_alloc, &fd), pvmm_status_already_released, FREED);
  CHECK_STATUS(pvmm_allocation_export_fabric(alloc, NULL), pvmm_status_invalid_argument, "handle is NULL");
  CHECK_STATUS(pvmm_allocation_export_fabric(foreign_alloc, &fabric), pvmm_status_invalid_handle, FOREIGN);
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
  CHECK_STATUS(pvmm_reservation_release(dead_res), pvmm_status_already_released, FREED);
  reservation_as_alloc.id = res.id;
  CHECK_STATUS(pvmm_allocation_size(reservation_as_alloc, &size), pvmm_status_invalid_handle,
               "a pvmm_reservation handle where a pvmm_allocation handle belongs");
  CHECK_STATUS(pvmm_reservation_address(res, NULL), pvmm_status_invalid_argument, "address is NULL");
  CHECK_STATUS(pvmm_reservation_address(dead_res, &address), pvmm_status_already_released, FREED);
  CHECK_STATUS(pvmm_reservation_size(res, NULL), pvmm_status_invalid_argument, "size is NULL");
  CHECK_STATUS(pvmm_reservation_map(dead_res, 0, alloc, 0, gran, &address), pvmm_status_already_released, FREED);
  CHECK_STATUS(pvmm_reservation_map(res, 0, dead_alloc, 0, gran, &address), pvmm_status_already_released, FREED);
  CHECK_STATUS(pvmm_reservation_map(res, 0, alloc, 0, 0, &address), pvmm_status_invalid_size, "");
  CHECK_STATUS(pvmm_reservation_map(res, 2 * gran, alloc, 0, gran, &address), pvmm_status_out_of_range, "");
  CHECK_OK(pvmm_reservation_map(res, 0, alloc, 0, gran, &address));
  CHECK_STATUS(pvmm_reservation_map(res, 0, alloc, 0, gran, NULL), pvmm_status_overlapping_mapping, "");
  CHECK_STATUS(pvmm_reservation_release(res), pvmm_status_busy, ""); /* mappings remain: the handle stays */
  CHECK_STATUS(pvmm_reservation_set_access(res, 0, gran, NULL, 1), pvmm_status_invalid_argument, "grants is NULL");
  CHECK_STATUS(pvmm_reservation_set_access(res, 0, gran, &bad_grant, 1), pvmm_status_invalid_location, "kind 7");
  CHECK_STATUS(pvmm_reservation_set_access(res, 0, gran, &bad_access, 1), pvmm_status_invalid_argument, "access 9");
  CHECK_STATUS(pvmm_reservation_set_access(res, gran, gran, &grant, 1), pvmm_status_not_mapped, "");
  CHECK_STATUS(pvmm_reservation_set_access(dead_res, 0, gran, &grant, 1), pvmm_status_already_released, FREED);
  CHECK_STATUS(pvmm_query_access(grant.location, address, NULL), pvmm_status_invalid_argument, "access is NULL");
  CHECK_STATUS(pvmm_query_access(bad_location, address, &value), pvmm_status_invalid_location, "kind 9");
  CHECK_STATUS(pvmm_query_access(grant.location, NULL, &value), pvmm_status_not_mapped, "no pvmm mapping");
  CHECK_STATUS(pvmm_reservation_unmap(res, gran, gran), pvmm_status_not_mapped, "");
  CHECK_STATUS(pvmm_reservation_unmap(dead_res, 0, gran), pvmm_status_already_released, FREED);
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

  /* the last error's parts */
  CHECK_STATUS(pvmm_reservation_create(0, 0, NULL, &out_res), pvmm_status_invalid_size, "");
  CHECK(pvmm_last_error_code() == pvmm_status_invalid_size);
  CHECK(strstr(pvmm_last_error_operation(), "reserve") != NULL);
  CHECK(strlen(pvmm_last_error_arguments()) > 0);
  CHECK(pvmm_last_error_native_name() != NULL && pvmm_last_error_hint() != NULL && pvmm_last_error_detail() != NULL);
  CHECK(pvmm_last_error_native_code() == 0);
  pvmm_clear_last_error();
  CHECK(pvmm_last_error_code() == pvmm_status_ok && strcmp(pvmm_last_error_message(), "") == 0);
  return check_summary("c_api/bad_input_vmm");
}
