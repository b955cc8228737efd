// Named endpoints over the abstract Unix socket namespace: listen, accept, connect, with peer checks.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include <pvmm/endpoint.hpp>

#include "core/operation.hpp"
#include "sharing/ipc_wait.hpp"

namespace pvmm::ipc {
namespace {

using clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

status check_name(std::string_view name, const detail::operation& op) {
  if (name.empty() || name.size() > max_endpoint_name)
    return op.fail(errc::invalid_argument,
                   fmt::format("an endpoint name has 1 to {} bytes, this one {}", max_endpoint_name, name.size()));
  if (name.find('\0') != std::string_view::npos)
    return op.fail(errc::invalid_argument, "an endpoint name may not contain a NUL byte");
  return {};
}

/// The abstract address of `name`: a leading NUL, then the name's bytes (no terminator; the length says).
socklen_t abstract_address(std::string_view name, sockaddr_un& address) {
  address = {};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path + 1, name.data(), name.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

status make_blocking(int fd, const detail::operation& op) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) return wait::system_failure(op, errno, "fcntl");
  return {};
}

}  // namespace

result<listener> listener::listen(std::string_view name, int backlog) {
  auto args = [&] { return fmt::format("name='{}', backlog={}", name, backlog); };
  const detail::operation op{"pvmm::ipc::listener::listen", args};
  PVMM_TRY(check_name(name, op));
  if (backlog <= 0) return op.fail(errc::invalid_argument, fmt::format("backlog {} is not positive", backlog));
  owned_fd s(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!s) return wait::system_failure(op, errno, "socket(AF_UNIX, SOCK_SEQPACKET)");
  sockaddr_un address;
  const socklen_t length = abstract_address(name, address);
  if (::bind(s.get(), reinterpret_cast<const sockaddr*>(&address), length) != 0) {
    if (errno == EADDRINUSE)
      return op.fail(errc::address_unavailable, fmt::format("another listener has the name '{}'", name),
                     "choose another name, or connect to that listener");
    return wait::system_failure(op, errno, "bind");
  }
  if (::listen(s.get(), backlog) != 0) return wait::system_failure(op, errno, "listen");
  return listener(std::move(s), std::string(name));
}

result<connection> listener::accept(milliseconds timeout, const peer_rule& rule) const {
  auto args = [&] { return fmt::format("name='{}', timeout={} ms", name_, timeout.count()); };
  const detail::operation op{"pvmm::ipc::listener::accept", args};
  if (!socket_) return op.fail(errc::already_released, "this listener is empty (moved from)");
  PVMM_TRY(wait::check_timeout(timeout, op));
  const auto deadline = wait::deadline_after(timeout);
  for (;;) {
    PVMM_TRY(wait::wait_until(socket_.get(), POLLIN, deadline, timeout, op));
    owned_fd peer(::accept4(socket_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!peer) {
      // The waiting peer gave up between poll and accept: wait for the next one.
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED || errno == EINTR) continue;
      return wait::system_failure(op, errno, "accept4");
    }
    if (auto ok = check_peer(peer.get(), rule); !ok) return op.wrap(std::move(ok).error());
    return connection(std::move(peer));
  }
}

result<connection> connect(std::string_view name, milliseconds timeout, const peer_rule& rule) {
  auto args = [&] { return fmt::format("name='{}', timeout={} ms", name, timeout.count()); };
  const detail::operation op{"pvmm::ipc::connect", args};
  PVMM_TRY(check_name(name, op));
  PVMM_TRY(wait::check_timeout(timeout, op));
  sockaddr_un address;
  const socklen_t length = abstract_address(name, address);
  const auto deadline = wait::deadline_after(timeout);
  milliseconds pause(1);  // between attempts while the listener is not there yet, doubling to 50 ms
  for (;;) {
    owned_fd s(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!s) return wait::system_failure(op, errno, "socket(AF_UNIX, SOCK_SEQPACKET)");
    int rc;
    do rc = ::connect(s.get(), reinterpret_cast<const sockaddr*>(&address), length);
    while (rc != 0 && errno == EINTR);
    if (rc == 0) {
      PVMM_TRY(make_blocking(s.get(), op));
      if (auto ok = check_peer(s.get(), rule); !ok) return op.wrap(std::move(ok).error());
      return connection(std::move(s));
    }
    // No listener yet (ECONNREFUSED), or its backlog is full (EAGAIN): try again until the deadline.
    if (errno != ECONNREFUSED && errno != EAGAIN) return wait::system_failure(op, errno, "connect");
    const milliseconds left = wait::left_until(deadline);
    if (left.count() == 0)
      return op.fail(errc::timeout, fmt::format("no listener accepted on '{}' within {} ms", name, timeout.count()),
                     "start the listening process first, or give connect a longer timeout");
    std::this_thread::sleep_for(std::min(pause, left));
    pause = std::min(pause * 2, milliseconds(50));
  }
}

}  // namespace pvmm::ipc
