// Hot layout: backend_counting is listed by mangled name in cmake/hot_layout.ld; a rename or a new signature drops it
// out of the layout (the CTest tools/hot_layout says so).
//
// Fault injection and backend call counting (pvmm/testing.hpp).
#include <atomic>

#include <fmt/format.h>

#include <pvmm/testing.hpp>

#include "backend/error_helpers.hpp"
#include "core/fault_injection.hpp"

namespace pvmm {
namespace detail {
namespace {
// Process-wide by design: a test arms it, then calls the code under test (on any thread).
std::atomic<std::size_t> backend_calls{0};
std::atomic<std::size_t> fail_at_call{0};  // absolute call number that fails; 0 = disarmed
}  // namespace

std::atomic<bool> backend_counting{false};

bool count_backend_call() noexcept {
  std::size_t n = backend_calls.fetch_add(1, std::memory_order_relaxed) + 1;
  std::size_t target = fail_at_call.load(std::memory_order_relaxed);
  if (target == 0 || n != target) return false;
  fail_at_call.store(0);
  return true;
}

error injected_failure(const char* call) {
  error e = make_error(errc::backend_error, fmt::format("fault injected into backend call {}", call));
  e.native_name = "PVMM_INJECTED_FAILURE";
  e.native_code = -1;
  return e;
}
}  // namespace detail

namespace testing {
void fail_nth_backend_call(std::size_t n) noexcept {
  detail::backend_counting.store(true);
  detail::fail_at_call.store(n == 0 ? 0 : detail::backend_calls.load() + n);
}
std::size_t backend_call_count() noexcept {
  detail::backend_counting.store(true);
  return detail::backend_calls.load();
}
}  // namespace testing
}  // namespace pvmm
