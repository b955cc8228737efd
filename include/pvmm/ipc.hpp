// pvmm/ipc.hpp - passing file descriptors between processes over Unix domain sockets (SCM_RIGHTS).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <pvmm/error.hpp>
#include <pvmm/exported_fd.hpp>

namespace pvmm::ipc {

/// Sends `fds` (borrowed; still owned by the caller) and `payload` in one message over a connected
/// AF_UNIX socket. Fails with errc::timeout when the peer does not take it within `timeout`.
status send_fds(int socket, const int* fds, std::size_t count, const void* payload, std::size_t payload_size,
                std::chrono::milliseconds timeout = std::chrono::milliseconds(10000));

/// What one received message held. Every received fd is owned.
struct received {
  std::vector<exported_fd> fds;
  std::vector<std::uint8_t> payload;
};

/// Receives one message with up to `max_fds` fds and up to `max_payload` bytes. Fails with errc::timeout,
/// errc::protocol_error when the peer closed or the message was truncated (received fds are closed then).
result<received> receive_fds(int socket, std::size_t max_fds, std::size_t max_payload,
                             std::chrono::milliseconds timeout = std::chrono::milliseconds(10000));

}  // namespace pvmm::ipc
