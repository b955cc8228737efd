/* The harness of the functional C tests (functional_*.c): each program checks that the backend has a device, runs
 * its parts twice and checks that the second pass leaves the open fds as it found them (a GPU driver opens fds of
 * its own at first use, measured on the H200: those are no leak). */
#ifndef PVMM_C_TEST_FUNCTIONAL_H
#define PVMM_C_TEST_FUNCTIONAL_H

#include <dirent.h>

#include "check.h"

static int open_fds(void) {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  if (d == NULL) return -1;
  while (readdir(d) != NULL) ++n;
  closedir(d);
  return n;
}

typedef void (*functional_parts)(const pvmm_backend_info* backend, const pvmm_device_info* device);

static int functional_main(const char* name, functional_parts everything) {
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
  CHECK(device.ordinal == 0 && device.vmm_supported == 1 && strlen(device.name) > 0);
  everything(&backend, &device);
  fds_before = open_fds();
  everything(&backend, &device);
  CHECK(open_fds() == fds_before);
  return check_summary(name);
}

#endif /* PVMM_C_TEST_FUNCTIONAL_H */
