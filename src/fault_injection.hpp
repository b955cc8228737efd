// Fault injection and call counting (pvmm/testing.hpp), applied to every backend call that is a step of an
// operation. Teardown and rollback calls (release, unmap of a dying reservation, free) bypass it: injecting
// there would only simulate the leak that rollback exists to prevent.
#pragma once

#include <pvmm/error.hpp>

namespace pvmm::detail {

bool inject_failure_now() noexcept;
error injected_failure(const char* call);

/// Runs backend call `f` as a step of an operation: counted, and failed instead when a test armed it.
template <class F>
auto call_backend(const char* name, F&& f) -> decltype(f()) {
  if (inject_failure_now()) return injected_failure(name);
  return f();
}

}  // namespace pvmm::detail
