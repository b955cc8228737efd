// Waiting on sockets: see ipc_wait.hpp.
#include "sharing/ipc_wait.hpp"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <limits>

#include <fmt/format.h>

#include "backend/error_helpers.hpp"
#include "core/timeout.hpp"

namespace pvmm::ipc::wait {

error system_failure(const detail::operation& op, int err, const char* call) {
  return op.wrap(detail::errno_error(errc::system_error, call, err));
}

error timed_out(const detail::operation& op, std::chrono::milliseconds timeout) {
  return op.fail(errc::timeout, fmt::format("the peer did not respond within {} ms", timeout.count()));
}

/// The one timeout rule (core/timeout.hpp): milliseconds >= 0; wait_forever (milliseconds::max()) waits without
/// limit; a negative value is invalid_argument. Anything longer than poll's int range is waited for in slices
/// against a deadline, never cast.
status check_timeout(std::chrono::milliseconds timeout, const detail::operation& op) {
  if (auto checked = detail::checked_timeout(timeout, "timeout"); !checked)
    return op.take_over(std::move(checked).error());
  return {};
}

std::chrono::steady_clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  return detail::deadline_from(timeout);
}

std::chrono::milliseconds left_until(std::chrono::steady_clock::time_point deadline) {
  using clock = std::chrono::steady_clock;
  if (deadline == clock::time_point::max()) return pvmm::ipc::wait_forever;
  return std::max(std::chrono::milliseconds(0), std::chrono::ceil<std::chrono::milliseconds>(deadline - clock::now()));
}

/// Waits for `events` on `socket`; timeout/hang-up reported as errors.
status wait_for(int socket, short events, std::chrono::milliseconds timeout, const detail::operation& op) {
  return wait_until(socket, events, deadline_after(timeout), timeout, op);
}

status wait_until(int socket, short events, std::chrono::steady_clock::time_point deadline,
                  std::chrono::milliseconds timeout, const detail::operation& op) {
  using clock = std::chrono::steady_clock;
  const bool forever = deadline == clock::time_point::max();
  pollfd p{socket, events, 0};
  for (;;) {
    int slice = -1;
    if (!forever) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - clock::now()).count();
      slice = static_cast<int>(std::clamp<long long>(left, 0, std::numeric_limits<int>::max()));
    }
    int n = ::poll(&p, 1, slice);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return system_failure(op, errno, "poll");
    if (n == 0) {
      if (!forever && clock::now() < deadline) continue;  // a slice of a long wait ended
      return timed_out(op, timeout);
    }
    if (p.revents & POLLNVAL) return system_failure(op, EBADF, "poll (the socket is not open)");
    return {};
  }
}

}  // namespace pvmm::ipc::wait
