/* pvmm's C interface doing real work on the configured backend, memory: data written through one mapping read back
 * through an import of the same memory, the pointer query, dma-buf export per chunk, a growable buffer and its
 * descriptor, pinned and managed memory, an exported fd over the fd transport. No fd is leaked. Plain C11. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdint.h>
#include <unistd.h>

#include "functional.h"

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

static void everything(const pvmm_backend_info* backend, const pvmm_device_info* device) {
  (void)backend;
  memory_round_trip();
  dmabuf_per_chunk(device->sharing_dmabuf);
  host_memory();
  fd_transport();
}

int main(void) { return functional_main("c_api/functional_memory", everything); }
