/* A tiny check macro for the C tests of pvmm's C interface (no framework: these are C11 programs). */
#ifndef PVMM_C_TEST_CHECK_H
#define PVMM_C_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pvmm/pvmm.h>

static int check_failures = 0;
static int check_count = 0;

#define CHECK(condition)                                                            \
  do {                                                                              \
    ++check_count;                                                                  \
    if (!(condition)) {                                                             \
      ++check_failures;                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #condition); \
    }                                                                               \
  } while (0)

/* `call` returns `expected`; a failure also leaves a last error with that code and a message holding `text`. */
#define CHECK_STATUS(call, expected, text)                                                                    \
  do {                                                                                                        \
    pvmm_status check_got_ = (call);                                                                          \
    ++check_count;                                                                                            \
    if (check_got_ != (expected)) {                                                                           \
      ++check_failures;                                                                                       \
      fprintf(stderr, "%s:%d: %s returned %s, expected %s; last error: %s\n", __FILE__, __LINE__, #call,      \
              pvmm_status_name(check_got_), pvmm_status_name(expected), pvmm_last_error_message());           \
    } else if ((expected) != pvmm_status_ok &&                                                                \
               (pvmm_last_error_code() != (expected) || strstr(pvmm_last_error_message(), (text)) == NULL)) { \
      ++check_failures;                                                                                       \
      fprintf(stderr, "%s:%d: %s: last error \"%s\" lacks \"%s\"\n", __FILE__, __LINE__, #call,               \
              pvmm_last_error_message(), (text));                                                             \
    }                                                                                                         \
  } while (0)

#define CHECK_OK(call) CHECK_STATUS(call, pvmm_status_ok, "")

static int check_summary(const char* name) {
  printf("%s: %d checks, %d failed\n", name, check_count, check_failures);
  return check_failures == 0 ? 0 : 1;
}

#endif /* PVMM_C_TEST_CHECK_H */
