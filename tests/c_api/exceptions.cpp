// No C++ exception crosses pvmm's C interface: a bootstrap callback written in C++ that throws (std::bad_alloc, a
// std::runtime_error, something else) makes the C call return a status with the exception's text, and the
// bootstrap is broken as after any failure. Built as C++ on purpose (a C callback cannot throw).
#include <cstdio>
#include <cstring>
#include <new>
#include <stdexcept>

#include <pvmm/pvmm.h>

#include "gather_ops.h"

namespace {

int failures = 0;
int checks = 0;

void expect(bool ok, const char* what) {
  ++checks;
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "CHECK failed: %s; last error: %s\n", what, pvmm_last_error_message());
  }
}

int throw_bad_alloc(void*, const void*, size_t, void*, uint64_t, int64_t) { throw std::bad_alloc(); }
int throw_runtime_error(void*, const void*, size_t, void*, uint64_t, int64_t) {
  throw std::runtime_error("the runtime's collective blew up");
}
int throw_int(void*, const void*, size_t, void*, uint64_t, int64_t) { throw 42; }

/// Calls allgather on a C bootstrap whose allgather is `callback`; returns the status.
pvmm_status allgather_through(int (*callback)(void*, const void*, size_t, void*, uint64_t, int64_t),
                              pvmm_status* second) {
  const pvmm_bootstrap_ops ops = gather_ops(2, callback, nullptr);
  pvmm_bootstrap boot{};
  if (pvmm_bootstrap_create(&ops, &boot) != pvmm_status_ok) return pvmm_last_error_code();
  int mine = 1, all[2] = {};
  const pvmm_status first = pvmm_bootstrap_allgather(boot, &mine, sizeof mine, all, INT64_MAX);
  *second = pvmm_bootstrap_barrier(boot, INT64_MAX);
  pvmm_bootstrap_release(boot);
  return first;
}

}  // namespace

int main() {
  try {
    pvmm_status second{};
    expect(allgather_through(throw_bad_alloc, &second) == pvmm_status_out_of_memory, "bad_alloc -> out_of_memory");
    expect(std::strstr(pvmm_last_error_message(), "out of memory") != nullptr, "bad_alloc's message");
    expect(second == pvmm_status_out_of_memory, "broken after bad_alloc");
    expect(allgather_through(throw_runtime_error, &second) == pvmm_status_backend_error, "runtime_error -> status");
    expect(std::strstr(pvmm_last_error_message(), "the runtime's collective blew up") != nullptr,
           "runtime_error's text");
    expect(second == pvmm_status_backend_error, "broken after runtime_error");
    expect(allgather_through(throw_int, &second) == pvmm_status_backend_error, "an int thrown -> status");
    expect(std::strstr(pvmm_last_error_message(), "threw") != nullptr, "unknown exception's text");
  } catch (...) {
    std::fprintf(stderr, "an exception crossed the C interface\n");
    return 1;
  }
  std::printf("c_api/exceptions: %d checks, %d failed\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
