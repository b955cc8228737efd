// Hot layout: inject_failure_now is listed by mangled name in cmake/hot_layout.ld; a rename or a new signature drops it
// out of the layout (the CTest tools/hot_layout says so).
//
// Fault injection and call counting (pvmm/testing.hpp), applied to every backend call that is a step of an
// operation. Teardown and rollback calls (release, unmap of a dying reservation, free) bypass it: injecting
// there would only simulate the leak that rollback exists to prevent.
#pragma once

#include <atomic>

#include <pvmm/error.hpp>

namespace pvmm::detail {

/// Set by the first call into pvmm::testing's counting functions: a process that never calls them pays one
/// relaxed load per backend call, not an atomic increment (an increment showed next to sub-microsecond
/// driver calls). Process-wide, like the counting it switches on. Hidden: see live_allocations (core/ownership.hpp).
[[gnu::visibility("hidden")]] extern std::atomic<bool> backend_counting;
/// Counts the call and says whether it is the one a test armed to fail.
bool count_backend_call() noexcept;
inline bool inject_failure_now() noexcept {
  return backend_counting.load(std::memory_order_relaxed) && count_backend_call();
}
[[gnu::cold]] error injected_failure(const char* call);

/// Runs backend call `f` as a step of an operation: counted, and failed instead when a test armed it.
template <class F>
auto call_backend(const char* name, F&& f) -> decltype(f()) {
  if (inject_failure_now()) return injected_failure(name);
  return f();
}

}  // namespace pvmm::detail
