/* The C face's conventions (issue 47): ABI growth (an "old" caller compiled with a struct cut short at its first
 * published size, and a "new" one), the one timeout rule, and an import size that is not a multiple of the
 * granularity (item 21: refused by the neutral layer on every backend, before the driver). */
#include <stdint.h>
#include <unistd.h>

#include "check.h"

/* pvmm_team_options as first published (0.1): what a caller compiled then passes. */
typedef struct old_team_options {
  size_t struct_size;
  int device;
  int64_t timeout_ms;
} old_team_options;

static void abi_growth(void) {
  pvmm_bootstrap b;
  CHECK_OK(pvmm_bootstrap_create_threads(1, &b));
  pvmm_team t;
  old_team_options old = {sizeof(old_team_options), 0, 30000};
  CHECK_OK(pvmm_team_create(b, (const pvmm_team_options*)(const void*)&old, &t)); /* the rest defaulted */
  CHECK_OK(pvmm_team_release(t));
  pvmm_team_options current = PVMM_INIT(pvmm_team_options);
  const int devices[1] = {0};
  current.access_devices = devices;
  current.access_device_count = 1;
  CHECK_OK(pvmm_team_create(b, &current, &t));
  CHECK_OK(pvmm_team_release(t));
  current.struct_size = sizeof(old_team_options) - 8; /* shorter than ever published */
  CHECK_STATUS(pvmm_team_create(b, &current, &t), pvmm_status_version_mismatch, "first published");
  current.struct_size = sizeof(pvmm_team_options) + 8; /* from a newer pvmm.h than this library */
  CHECK_STATUS(pvmm_team_create(b, &current, &t), pvmm_status_version_mismatch, "pvmm_team_options");
  current = (pvmm_team_options)PVMM_INIT(pvmm_team_options);
  current.access_device_count = 1; /* a count without the array */
  CHECK_STATUS(pvmm_team_create(b, &current, &t), pvmm_status_invalid_argument, "access_devices is NULL");
  CHECK_OK(pvmm_bootstrap_release(b));
  /* PVMM_INIT's defaults: 0 is not special */
  pvmm_window_options w = PVMM_INIT(pvmm_window_options);
  CHECK(w.timeout_ms == 30000 && w.struct_size == sizeof w);
  pvmm_pinned_options p = PVMM_INIT(pvmm_pinned_options);
  CHECK(p.portable == 1 && p.mapped == 1 && p.write_combined == 0);
  pvmm_bootstrap_ops ops = PVMM_INIT(pvmm_bootstrap_ops);
  CHECK(ops.version == PVMM_BOOTSTRAP_OPS_VERSION && ops.struct_size == sizeof ops);
}

static void timeout_rule(void) {
  char name[64];
  snprintf(name, sizeof name, "pvmm-c-timeouts-%d", (int)getpid());
  pvmm_listener l;
  pvmm_connection c, accepted;
  CHECK_OK(pvmm_listen(name, &l));
  CHECK_STATUS(pvmm_listener_accept(l, -2, &c), pvmm_status_invalid_argument, "timeout_ms = -2 ms is negative");
  CHECK_STATUS(pvmm_connect(name, INT64_MIN, &c), pvmm_status_invalid_argument, "timeout_ms");
  CHECK_STATUS(pvmm_listener_accept(l, 0, &c), pvmm_status_timeout, ""); /* 0: expires now */
  CHECK_OK(pvmm_connect(name, PVMM_WAIT_FOREVER, &c));                     /* -1: no deadline (it is there) */
  CHECK_OK(pvmm_listener_accept(l, PVMM_WAIT_FOREVER, &accepted));
  unsigned char byte = 7;
  CHECK_STATUS(pvmm_connection_send(c, NULL, 0, &byte, 1, -5), pvmm_status_invalid_argument, "timeout_ms");
  CHECK_OK(pvmm_connection_send(c, NULL, 0, &byte, 1, 0));
  CHECK_OK(pvmm_connection_release(c));
  CHECK_OK(pvmm_connection_release(accepted));
  CHECK_OK(pvmm_listener_release(l));
  pvmm_bootstrap b;
  CHECK_STATUS(pvmm_bootstrap_create_endpoints(name, 0, 1, -3, &b), pvmm_status_invalid_argument, "timeout_ms");
  pvmm_team_options o = PVMM_INIT(pvmm_team_options);
  o.timeout_ms = -7;
  CHECK_OK(pvmm_bootstrap_create_threads(1, &b));
  pvmm_team t;
  CHECK_STATUS(pvmm_team_create(b, &o, &t), pvmm_status_invalid_argument, "pvmm_team_options.timeout_ms = -7");
  CHECK_OK(pvmm_bootstrap_release(b));
}

static void import_size(void) {
  pvmm_allocation_properties p = PVMM_INIT(pvmm_allocation_properties);
  p.exportable = pvmm_handle_posix_fd;
  size_t gran = 0;
  pvmm_allocation a, imported;
  int fd = -1;
  if (pvmm_query_granularity(&p, &gran, NULL) != pvmm_status_ok || pvmm_allocation_create(gran, &p, &a) != 0 ||
      pvmm_allocation_export_posix_fd(a, &fd) != pvmm_status_ok) {
    printf("[pvmm-skip] import size: no exportable allocation here: %s\n", pvmm_last_error_message());
    return;
  }
  CHECK_STATUS(pvmm_allocation_import_posix_fd(fd, gran + 1, &imported), pvmm_status_unaligned,
               "not a multiple of the granularity");
  CHECK_OK(pvmm_allocation_import_posix_fd(fd, gran, &imported));
  CHECK_OK(pvmm_allocation_release(imported));
  close(fd);
  CHECK_OK(pvmm_allocation_release(a));
}

/* Item 17: pvmm_export_dmabuf checks the arguments, then the mapping, then the capability (pvmm.h's order). */
static void dmabuf_order(void) {
  pvmm_dmabuf_piece piece;
  size_t count = 0;
  CHECK_STATUS(pvmm_export_dmabuf((void*)4097, 4096, &piece, 1, &count), pvmm_status_unaligned, "page size");
  CHECK_STATUS(pvmm_export_dmabuf((void*)4096, 4096, &piece, 1, &count), pvmm_status_not_mapped, "");
}

int main(void) {
  dmabuf_order();
  abi_growth();
  timeout_rule();
  import_size();
  return check_summary("c_api/conventions");
}
