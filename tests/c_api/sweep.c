/* The generated argument sweep (tests/c_api/sweep_gen.py): every pvmm_status entry point of pvmm.h with NULL in
 * each pointer parameter and SIZE_MAX in each size_t parameter, one child process per call. An answer passes when it
 * is a specific status (never backend_error or a code outside the list; ok only for a parameter pvmm.h documents as
 * optional) with a message, and an invalid_argument for a NULL names that parameter. */
#include "sweep_cases.h"

static const sweep_case* current;

static int run_current(void) {
  pvmm_clear_last_error();
  const pvmm_status s = current->call();
  const char* message = pvmm_last_error_message();
  if (s == pvmm_status_ok) {
    if (current->optional) return 0;
    fprintf(stderr, "%s(%s = %s): ok\n", current->function, current->parameter, current->null ? "NULL" : "SIZE_MAX");
    return 1;
  }
  int bad = s == pvmm_status_backend_error || strcmp(pvmm_status_name(s), "unknown") == 0 || message[0] == '\0' ||
            pvmm_last_error_code() != s;
  if (current->null && !current->optional && s == pvmm_status_invalid_argument &&
      strstr(message, current->parameter) == NULL)
    bad = 1;
  if (bad)
    fprintf(stderr, "%s(%s = %s): %s: %s\n", current->function, current->parameter, current->null ? "NULL" : "SIZE_MAX",
            pvmm_status_name(s), message);
  return bad;
}

int main(void) {
  const size_t n = sizeof cases / sizeof cases[0];
  for (size_t i = 0; i < n; ++i) {
    current = &cases[i];
    char name[160];
    snprintf(name, sizeof name, "%s(%s = %s)", cases[i].function, cases[i].parameter,
             cases[i].null ? "NULL" : "SIZE_MAX");
    run_in_child(name, run_current, 20);
  }
  printf("c_api/sweep: %d functions, %zu calls\n", SWEEP_FUNCTIONS, n);
  return check_summary("c_api/sweep");
}
