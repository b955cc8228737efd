// Named endpoints, abstract or path names: listen, accept, connect, with peer checks (paths: endpoint_path.cpp).
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include <pvmm/endpoint.hpp>

#include "core/operation.hpp"
#include "sharing/endpoint_path.hpp"
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

/// The address of `name`: a path's bytes and its terminating NUL; or, for an abstract name, a leading NUL and the
/// name's bytes (no terminator; the length says).
socklen_t endpoint_address(std::string_view name, sockaddr_un& address) {
  address = {};
  address.sun_family = AF_UNIX;
  const std::size_t skip = is_path_name(name) ? 0 : 1;
  std::memcpy(address.sun_path + skip, name.data(), name.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

/// connect's timeout: what was found at the name, and for an abstract name the network namespace it lives in.
error no_listener(std::string_view name, int last_error, milliseconds timeout, const detail::operation& op) {
  if (!is_path_name(name))
    return op.fail(
        errc::timeout, fmt::format("no listener accepted on '{}' within {} ms", name, timeout.count()),
        "start the listening process first, or give connect a longer timeout. Abstract names (not starting with "
        "'/') do not cross network namespaces: a listener in another container or network namespace is invisible "
        "here; use a path name on a filesystem both processes see (pvmm::ipc::runtime_directory())");
  const char* found = last_error == ENOENT ? "no socket file is there"
                                           : "a file is there but nobody listens on it (a socket file left by a "
                                             "process that died?)";
  return op.fail(errc::timeout,
                 fmt::format("no listener accepted on '{}' within {} ms: {}", name, timeout.count(), found),
                 "start the listening process first, or give connect a longer timeout; its next listen() on this "
                 "path removes a stale file");
}

/// What a call on an aborted connection or listener answers (abort() from another thread).
error aborted_error(const char* operation, const char* what) {
  const detail::operation op{operation};
  return op.fail(errc::peer_lost, fmt::format("this {} was aborted (its abort() was called)", what),
                 "make a new one to talk again");
}

/// A connection's call: refused once aborted, and its failure said as the abort when an abort ended it.
template <class Result, class Call>
Result guarded(const std::atomic<bool>& aborted, const char* operation, Call&& call) {
  if (aborted.load(std::memory_order_acquire)) return aborted_error(operation, "connection");
  Result r = call();
  if (!r && aborted.load(std::memory_order_acquire)) return aborted_error(operation, "connection");
  return r;
}

status make_blocking(int fd, const detail::operation& op) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) return wait::system_failure(op, errno, "fcntl");
  return {};
}

}  // namespace

connection::connection(connection&& other) noexcept
    : socket_(std::move(other.socket_)), aborted_(other.aborted_.exchange(false)) {}

connection& connection::operator=(connection&& other) noexcept {
  if (this != &other) {
    socket_ = std::move(other.socket_);
    aborted_.store(other.aborted_.exchange(false));
  }
  return *this;
}

status connection::send(const int* fds, std::size_t count, const void* payload, std::size_t payload_size,
                        milliseconds timeout) const {
  return guarded<status>(aborted_, "pvmm::ipc::connection::send",
                         [&] { return send_fds(socket_.get(), fds, count, payload, payload_size, timeout); });
}

status connection::send(const std::vector<owned_fd>& fds, const void* payload, std::size_t payload_size,
                        milliseconds timeout) const {
  return guarded<status>(aborted_, "pvmm::ipc::connection::send",
                         [&] { return send_fds(socket_.get(), fds, payload, payload_size, timeout); });
}

result<received> connection::receive(std::size_t max_fds, std::size_t max_payload, milliseconds timeout) const {
  return guarded<result<received>>(aborted_, "pvmm::ipc::connection::receive",
                                   [&] { return receive_fds(socket_.get(), max_fds, max_payload, timeout); });
}

result<received> connection::receive_exactly(std::size_t fd_count, std::size_t max_payload,
                                             milliseconds timeout) const {
  return guarded<result<received>>(aborted_, "pvmm::ipc::connection::receive_exactly",
                                   [&] { return ipc::receive_exactly(socket_.get(), fd_count, max_payload, timeout); });
}

void connection::abort() noexcept {
  aborted_.store(true, std::memory_order_release);
  // Wakes a poll on it in another thread (POLLHUP), and the peer reads EOF. Closing would let the number be reused.
  if (socket_.valid()) ::shutdown(socket_.get(), SHUT_RDWR);
}

result<listener> listener::listen(std::string_view name, int backlog) {
  auto args = [&] { return fmt::format("name='{}', backlog={}", name, backlog); };
  const detail::operation op{"pvmm::ipc::listener::listen", args};
  PVMM_TRY(check_name(name, op));
  if (backlog <= 0) return op.fail(errc::invalid_argument, fmt::format("backlog {} is not positive", backlog));
  owned_fd s(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!s) return wait::system_failure(op, errno, "socket(AF_UNIX, SOCK_SEQPACKET)");
  sockaddr_un address;
  const socklen_t length = endpoint_address(name, address);
  bound_file file;
  if (is_path_name(name)) {
    PVMM_TRY_ASSIGN(bound, path::bind(s.get(), name, address, length, op));
    file = {bound.device, bound.inode};
  } else if (::bind(s.get(), reinterpret_cast<const sockaddr*>(&address), length) != 0) {
    if (errno == EADDRINUSE)
      return op.fail(errc::address_unavailable, fmt::format("another listener has the name '{}'", name),
                     "choose another name, or connect to that listener");
    return wait::system_failure(op, errno, "bind");
  }
  listener out(std::move(s), std::string(name), file);  // from here on its file goes with it
  if (::listen(out.socket_.get(), backlog) != 0) return wait::system_failure(op, errno, "listen");
  return result<listener>(std::move(out));
}

listener::listener(listener&& other) noexcept
    : socket_(std::move(other.socket_)),
      name_(std::move(other.name_)),
      file_(std::exchange(other.file_, {})),
      aborted_(other.aborted_.exchange(false)) {}

listener& listener::operator=(listener&& other) noexcept {
  if (this != &other) {
    remove_file();
    socket_ = std::move(other.socket_);
    name_ = std::move(other.name_);
    file_ = std::exchange(other.file_, {});
    aborted_.store(other.aborted_.exchange(false));
  }
  return *this;
}

void listener::abort() noexcept {
  aborted_.store(true, std::memory_order_release);
  if (socket_.valid()) ::shutdown(socket_.get(), SHUT_RDWR);  // wakes a waiting accept's poll
}

listener::~listener() { remove_file(); }

void listener::remove_file() noexcept {
  // Before the socket closes: a file whose listener is gone is a stale file to the next process.
  if (file_.inode != 0) path::remove(name_, {file_.device, file_.inode});
  file_ = {};
}

result<connection> listener::accept(milliseconds timeout, const peer_rule& rule) const {
  auto args = [&] { return fmt::format("name='{}', timeout={} ms", name_, timeout.count()); };
  const detail::operation op{"pvmm::ipc::listener::accept", args};
  if (!socket_) return op.fail(errc::already_released, "this listener is empty (moved from)");
  PVMM_TRY(wait::check_timeout(timeout, op));
  const auto deadline = wait::deadline_after(timeout);
  for (;;) {
    if (aborted()) return aborted_error("pvmm::ipc::listener::accept", "listener");
    auto ready = wait::wait_until(socket_.get(), POLLIN, deadline, timeout, op);
    if (aborted()) return aborted_error("pvmm::ipc::listener::accept", "listener");
    PVMM_TRY(std::move(ready));
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
  const socklen_t length = endpoint_address(name, address);
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
    // No listener yet (ECONNREFUSED; for a path also no file yet, ENOENT), or its backlog is full (EAGAIN): try
    // again until the deadline.
    const int err = errno;
    if (err != ECONNREFUSED && err != EAGAIN && !(err == ENOENT && is_path_name(name)))
      return wait::system_failure(op, err, "connect");
    const milliseconds left = wait::left_until(deadline);
    if (left.count() == 0) return no_listener(name, err, timeout, op);
    std::this_thread::sleep_for(std::min(pause, left));
    pause = std::min(pause * 2, milliseconds(50));
  }
}

}  // namespace pvmm::ipc

namespace pvmm::ipc::probe {
bool nobody_listens(std::string_view name) noexcept {
  if (name.empty() || name.size() > max_endpoint_name) return false;
  sockaddr_un address;
  const socklen_t length = endpoint_address(name, address);
  owned_fd s(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!s) return false;
  int rc;
  do rc = ::connect(s.get(), reinterpret_cast<const sockaddr*>(&address), length);
  while (rc != 0 && errno == EINTR);
  return rc != 0 && (errno == ECONNREFUSED || (errno == ENOENT && is_path_name(name)));
}
}  // namespace pvmm::ipc::probe
