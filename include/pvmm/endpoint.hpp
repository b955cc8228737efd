// pvmm/endpoint.hpp - named endpoints for the fd transport: a process listens on a name, its peers connect to
// it (the pattern of cuda-samples' memMapIPCDrv), without any socket code of the user's own.
//
// Names live in Linux's abstract Unix socket namespace: nothing appears on the filesystem, a name is free again
// the moment its listener closes, and any process in the same network namespace can reach it. That is why both
// sides check who the other is (SO_PEERCRED) and, unless told otherwise, accept only the same user.
//
// Threading: a listener or connection may be used by one thread at a time; different ones are independent.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <pvmm/error.hpp>
#include <pvmm/ipc.hpp>
#include <pvmm/owned_fd.hpp>

namespace pvmm::ipc {

/// The longest endpoint name (sun_path less the abstract namespace's leading NUL).
inline constexpr std::size_t max_endpoint_name = 107;

/// One end of a connection between two processes (AF_UNIX, SOCK_SEQPACKET: one send is one message). Owns its
/// socket; move-only. Every call takes a timeout with the transport's rules (milliseconds >= 0, wait_forever).
class connection {
 public:
  connection() noexcept = default;
  /// Adopts a connected AF_UNIX socket with message boundaries.
  explicit connection(owned_fd socket) noexcept : socket_(std::move(socket)) {}

  status send(const int* fds, std::size_t count, const void* payload, std::size_t payload_size,
              std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) const {
    return send_fds(socket_.get(), fds, count, payload, payload_size, timeout);
  }
  status send(const std::vector<owned_fd>& fds, const void* payload, std::size_t payload_size,
              std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) const {
    return send_fds(socket_.get(), fds, payload, payload_size, timeout);
  }
  result<received> receive(std::size_t max_fds, std::size_t max_payload,
                           std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) const {
    return receive_fds(socket_.get(), max_fds, max_payload, timeout);
  }
  result<received> receive_exactly(std::size_t fd_count, std::size_t max_payload,
                                   std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) const {
    return ipc::receive_exactly(socket_.get(), fd_count, max_payload, timeout);
  }
  /// Who is at the other end, as the kernel recorded it when the connection was made.
  result<peer_credentials> peer() const { return query_peer(socket_.get()); }

  int native_handle() const noexcept { return socket_.get(); }
  bool valid() const noexcept { return socket_.valid(); }
  explicit operator bool() const noexcept { return valid(); }

 private:
  owned_fd socket_;
};

/// Listens on a name; accepts connections one at a time. Owns its socket; the name is free again when it goes.
class listener {
 public:
  listener() noexcept = default;

  /// Listens on `name` (1 to max_endpoint_name bytes, no NUL byte). errc::address_unavailable when another
  /// listener has the name; errc::invalid_argument for a bad name.
  static result<listener> listen(std::string_view name, int backlog = 64);

  /// Accepts the next connection within `timeout` (errc::timeout otherwise). A peer that does not satisfy
  /// `rule` is disconnected and errc::peer_rejected returned, naming what differs; accept again for the next.
  result<connection> accept(std::chrono::milliseconds timeout = std::chrono::milliseconds(10000),
                            const peer_rule& rule = peer_rule::same_user()) const;

  const std::string& name() const noexcept { return name_; }
  int native_handle() const noexcept { return socket_.get(); }
  bool valid() const noexcept { return socket_.valid(); }
  explicit operator bool() const noexcept { return valid(); }

 private:
  listener(owned_fd socket, std::string name) noexcept : socket_(std::move(socket)), name_(std::move(name)) {}
  owned_fd socket_;
  std::string name_;
};

/// Connects to the listener on `name`, waiting for it to appear until `timeout` passes (peers start in any
/// order): errc::timeout then. The listener must satisfy `rule` (errc::peer_rejected otherwise).
result<connection> connect(std::string_view name, std::chrono::milliseconds timeout = std::chrono::milliseconds(10000),
                           const peer_rule& rule = peer_rule::same_user());

}  // namespace pvmm::ipc
