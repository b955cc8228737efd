/* The shared parts of the bad-input C tests (bad_input_*.c): every entry point of pvmm's C interface with bad input
 * (NULL, zero, foreign, freed and double-freed handles, handles of another type, wrong struct sizes, a bootstrap
 * table of the wrong version) gives a specific status and message, never a crash. */
#ifndef PVMM_C_TEST_BAD_INPUT_H
#define PVMM_C_TEST_BAD_INPUT_H

#include "check.h"

/* What the last error's message holds for a released handle, a handle of no kind pvmm made, a zero handle. */
#define FREED "released already"
#define FOREIGN "is not a"
#define NULL_HANDLE "a null"

/* Whether the backend has a device; where it has none (CI builds the GPU backends where there is none), prints the
 * skip line. */
static int have_device(void) {
  pvmm_backend_info here = PVMM_INIT(pvmm_backend_info);
  int devices = 0;
  if (pvmm_query_backend(&here) != pvmm_status_ok || !here.available || pvmm_device_count(&devices) != pvmm_status_ok ||
      devices < 1) {
    printf("[pvmm-skip] the rest needs a device: the %s backend has none here: %s\n", here.name,
           here.unavailable_reason);
    return 0;
  }
  return 1;
}

#endif /* PVMM_C_TEST_BAD_INPUT_H */
