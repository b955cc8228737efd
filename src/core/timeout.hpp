// One timeout rule for every face of pvmm (pvmm/pvmm.h, pvmm/pvmm.hpp and the Python stub state it once):
// a timeout is milliseconds; 0 expires now (try once, do not wait); wait_forever (C++: ipc::wait_forever =
// milliseconds::max(); C: PVMM_WAIT_FOREVER = -1; Python: pvmm.WAIT_FOREVER = -1) waits without deadline; any
// other negative value is errc::invalid_argument naming the parameter. Defaults live in signatures (C option
// structs: their init macro), never in a special value.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>

#include <pvmm/error.hpp>
#include <pvmm/ipc.hpp>

namespace pvmm::detail {

/// The C and Python spelling of wait_forever.
inline constexpr std::int64_t wait_forever_ms = -1;

/// The error of a negative timeout that is not the wait-forever value.
[[gnu::cold]] inline error negative_timeout(std::int64_t ms, const char* parameter) {
  char text[160];
  std::snprintf(text, sizeof text, "%s = %lld ms is negative", parameter ? parameter : "timeout",
                static_cast<long long>(ms));
  error e;
  e.code = errc::invalid_argument;
  e.operation = "pvmm::detail::checked_timeout";
  e.detail = text;
  e.hint =
      "use 0 to try once without waiting, or the wait-forever value (C: PVMM_WAIT_FOREVER, -1; C++: "
      "pvmm::ipc::wait_forever; Python: pvmm.WAIT_FOREVER) to wait without limit";
  return e;
}

/// Checks a timeout given as integer milliseconds (the C and Python faces): 0 and positive values as they are,
/// -1 (PVMM_WAIT_FOREVER) as ipc::wait_forever, another negative value errc::invalid_argument naming `parameter`.
/// Allocates only on the error path.
inline result<std::chrono::milliseconds> checked_timeout(std::int64_t ms, const char* parameter) {
  if (ms >= 0) return std::chrono::milliseconds(ms);
  if (ms == wait_forever_ms) return ipc::wait_forever;
  return negative_timeout(ms, parameter);
}

/// The same rule for a C++ std::chrono::milliseconds: wait_forever is milliseconds::max(), any negative value is
/// errc::invalid_argument naming `parameter`.
inline result<std::chrono::milliseconds> checked_timeout(std::chrono::milliseconds timeout, const char* parameter) {
  if (timeout.count() >= 0) return timeout;
  return negative_timeout(timeout.count(), parameter);
}

/// When a wait of `timeout` (checked: >= 0 or wait_forever) begun now ends: now for 0, time_point::max() for
/// wait_forever or any timeout past the clock's range (never waits out; compared in milliseconds, since converting
/// to the clock's nanoseconds would overflow).
inline std::chrono::steady_clock::time_point deadline_from(std::chrono::milliseconds timeout) noexcept {
  using clock = std::chrono::steady_clock;
  const auto now = clock::now();
  if (timeout.count() <= 0) return now;
  if (timeout >= std::chrono::duration_cast<std::chrono::milliseconds>(clock::time_point::max() - now))
    return clock::time_point::max();
  return now + timeout;
}

}  // namespace pvmm::detail
