// Waiting on sockets for the fd transport and the named endpoints: timeouts checked one way, long waits in
// slices against a deadline, errno failures reported as system_error.
#pragma once

#include <chrono>

#include <pvmm/error.hpp>

#include "operation.hpp"

namespace pvmm::ipc::wait {

/// errc::system_error for a failed system call, in the operation's context.
error system_failure(const detail::operation& op, int err, const char* call);
/// Timeouts are milliseconds >= 0 (0 polls once); negative is errc::invalid_argument.
status check_timeout(std::chrono::milliseconds timeout, const detail::operation& op);
/// Waits for `events` on `socket` within `timeout` (wait_forever: no limit); errc::timeout when it passes.
status wait_for(int socket, short events, std::chrono::milliseconds timeout, const detail::operation& op);

}  // namespace pvmm::ipc::wait
