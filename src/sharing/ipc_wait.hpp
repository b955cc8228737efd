// Waiting on sockets for the fd transport and the named endpoints: timeouts checked one way, long waits in
// slices against a deadline, errno failures reported as system_error.
#pragma once

#include <chrono>

#include <pvmm/error.hpp>
#include <pvmm/ipc.hpp>

#include "core/operation.hpp"

namespace pvmm::ipc::wait {

/// errc::system_error for a failed system call, in the operation's context.
error system_failure(const detail::operation& op, int err, const char* call);
/// errc::timeout: the peer did not respond within `timeout`.
error timed_out(const detail::operation& op, std::chrono::milliseconds timeout);
/// Timeouts are milliseconds >= 0 (0 polls once); negative is errc::invalid_argument.
status check_timeout(std::chrono::milliseconds timeout, const detail::operation& op);
/// When a wait of `timeout` from now ends; wait_forever (or anything past the clock's range) never does.
std::chrono::steady_clock::time_point deadline_after(std::chrono::milliseconds timeout);
/// What is left of a wait until `deadline` (0 once it passed; wait_forever for a deadline that never comes).
std::chrono::milliseconds left_until(std::chrono::steady_clock::time_point deadline);
/// Waits for `events` on `socket` within `timeout` (wait_forever: no limit); errc::timeout when it passes.
status wait_for(int socket, short events, std::chrono::milliseconds timeout, const detail::operation& op);
/// As wait_for, until `deadline` (from deadline_after(timeout)): one wait of several that share a deadline.
status wait_until(int socket, short events, std::chrono::steady_clock::time_point deadline,
                  std::chrono::milliseconds timeout, const detail::operation& op);

}  // namespace pvmm::ipc::wait
