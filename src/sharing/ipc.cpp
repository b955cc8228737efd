// SCM_RIGHTS transport: the part every communication runtime writes by hand.
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <pvmm/ipc.hpp>

#include "backend/error_helpers.hpp"
#include "core/fd_budget.hpp"
#include "core/operation.hpp"
#include "core/propagate.hpp"
#include "sharing/ipc_wait.hpp"

namespace pvmm::ipc {
namespace {

using wait::check_timeout;
using wait::system_failure;
using wait::wait_for;

constexpr std::size_t scm_max_fd = 253;  // the kernel's limit of fds in one SCM_RIGHTS message (SCM_MAX_FD)

/// Message boundaries are part of the contract (one call, one message; a longer message is an error, not
/// the start of the next one): a byte stream cannot keep that promise.
status check_socket_type(int socket, const detail::operation& op) {
  int type = 0;
  socklen_t len = sizeof type;
  if (::getsockopt(socket, SOL_SOCKET, SO_TYPE, &type, &len) != 0)
    return system_failure(op, errno, "getsockopt(SO_TYPE)");
  if (type == SOCK_STREAM)
    return op.fail(errc::invalid_argument, "the socket is SOCK_STREAM, which has no message boundaries",
                   "use an AF_UNIX SOCK_SEQPACKET (or SOCK_DGRAM) socket");
  return {};
}

/// Room for `fds` fds and for the credentials message a socket with SO_PASSCRED also receives (without it the
/// credentials fill the buffer and the fds are discarded).
constexpr std::size_t control_room(std::size_t fds) {
  return CMSG_SPACE(sizeof(int) * std::max<std::size_t>(fds, 1)) + CMSG_SPACE(sizeof(ucred));
}

/// Owns every fd a received message's SCM_RIGHTS carried (before the message is judged, so none leaks).
void take_fds(msghdr& msg, std::vector<owned_fd>& out) {
  // Room first: where memory runs out for it, every received fd is closed before the exception goes on.
  auto each_fd = [&](auto&& f) {
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS || c->cmsg_len < CMSG_LEN(0)) continue;
      std::size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < k; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        f(fd);
      }
    }
  };
  std::size_t count = 0;
  each_fd([&](int) { ++count; });
  try {
    out.reserve(out.size() + count);
  } catch (...) {
    each_fd([](int fd) { ::close(fd); });
    throw;
  }
  each_fd([&](int fd) { out.emplace_back(fd); });
}

/// The kernel truncated the fds (MSG_CTRUNC) though there was room for more than arrived: it could not install
/// them. When that is because this process is out of fds, the error says so (probed while the fds that did
/// arrive are still open, so the table is as full as the kernel found it); 0 otherwise.
int out_of_fds_for(const msghdr& msg, std::size_t arrived, std::size_t room) {
  if (!(msg.msg_flags & MSG_CTRUNC) || arrived >= std::max<std::size_t>(room, 1)) return 0;
  return detail::probe_fd_exhaustion();
}

/// The next message's real length, without taking it: the buffer is sized by what arrived, never by the caller's
/// limit (max_payload may be SIZE_MAX), and a longer message is still taken (its fds closed). The peek also
/// receives the message's fds (the kernel installs them on a peek too; they are closed at once), so a process
/// with no fd slot for them learns it here and the message stays queued for a call after fds were freed, instead
/// of being taken with its fds discarded.
result<std::size_t> peek_length(int socket, std::size_t fd_room, const detail::operation& op) {
  alignas(cmsghdr) char control[control_room(scm_max_fd)];
  msghdr msg{};
  msg.msg_control = control;
  msg.msg_controllen = control_room(fd_room);
  ssize_t length;
  do length = ::recvmsg(socket, &msg, MSG_PEEK | MSG_TRUNC | MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  while (length < 0 && errno == EINTR);
  if (length < 0 && errno == ECONNRESET)  // the peer closed with our messages unread: it is gone
    return op.fail(errc::peer_lost, "the peer closed the connection (ECONNRESET)");
  if (length < 0) return system_failure(op, errno, "recvmsg(MSG_PEEK | MSG_TRUNC)");
  std::vector<owned_fd> peeked;
  take_fds(msg, peeked);
  if (const int err = out_of_fds_for(msg, peeked.size(), fd_room))
    return op.wrap(detail::fd_exhaustion_error(
        "recvmsg", err,
        "no fd slot for the fds of the next message, which stays queued: receive again after closing fds"));
  return static_cast<std::size_t>(length);
}

}  // namespace

status send_fds(int socket, const int* fds, std::size_t count, const void* payload, std::size_t payload_size,
                std::chrono::milliseconds timeout) {
  auto args = [&] { return fmt::format("socket={}, fds={}, payload={} bytes", socket, count, payload_size); };
  const detail::operation op{"pvmm::ipc::send_fds", args};
  if (count > scm_max_fd) return op.fail(errc::invalid_argument, fmt::format("at most {} fds per message", scm_max_fd));
  if (count > 0 && fds == nullptr) return op.fail(errc::invalid_argument, "fds is null");
  if (payload_size > 0 && payload == nullptr) return op.fail(errc::invalid_argument, "payload is null");
  if (auto ok = check_timeout(timeout, op); !ok) return ok;
  if (auto ok = check_socket_type(socket, op); !ok) return ok;
  std::uint8_t zero = 0;
  iovec iov{payload_size ? const_cast<void*>(payload) : &zero, payload_size ? payload_size : 1};
  std::vector<char> control(count ? CMSG_SPACE(sizeof(int) * count) : 0);
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (count) {
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * count);
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * count);
  }
  // Send first, wait only when the socket refuses: AF_UNIX reports POLLOUT only while under a quarter of the
  // send buffer is queued, so waiting first times out on a socket that would take the message at once.
  const auto deadline = wait::deadline_after(timeout);
  for (bool waited = false;;) {
    ssize_t n = ::sendmsg(socket, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // Woken but still refused, with the deadline passed: the peer did not make room in time.
      if (waited && std::chrono::steady_clock::now() >= deadline) return wait::timed_out(op, timeout);
      if (auto ok = wait::wait_until(socket, POLLOUT, deadline, timeout, op); !ok) return ok;
      waited = true;
      continue;
    }
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET))  // as a receive's EOF: the peer is gone
      return op.fail(errc::peer_lost, fmt::format("the peer closed the connection ({})", std::strerror(errno)));
    if (n < 0) return system_failure(op, errno, "sendmsg");
    if (static_cast<std::size_t>(n) != iov.iov_len)
      return op.fail(errc::protocol_error, "the message was sent only in part");
    return {};
  }
}

peer_rule peer_rule::same_user() {
  peer_rule r;
  r.uid = ::geteuid();
  return r;
}

result<peer_credentials> query_peer(int socket) {
  ucred c{};
  socklen_t len = sizeof c;
  if (::getsockopt(socket, SOL_SOCKET, SO_PEERCRED, &c, &len) != 0) {
    auto args = [&] { return fmt::format("socket={}", socket); };
    return system_failure(detail::operation{"pvmm::ipc::query_peer", args}, errno, "getsockopt(SO_PEERCRED)");
  }
  return peer_credentials{c.pid, c.uid, c.gid};
}

status check_peer(int socket, const peer_rule& rule) {
  auto args = [&] { return fmt::format("socket={}", socket); };
  const detail::operation op{"pvmm::ipc::check_peer", args};
  auto who = query_peer(socket);
  if (!who) return std::move(who).error();
  auto reject = [&](const char* field, long long want, long long got) {
    return op.fail(errc::peer_rejected, fmt::format("the peer's {} is {}, the rule requires {}", field, got, want));
  };
  if (rule.uid && *rule.uid != who->uid) return reject("uid", *rule.uid, who->uid);
  if (rule.gid && *rule.gid != who->gid) return reject("gid", *rule.gid, who->gid);
  if (rule.pid && *rule.pid != who->pid) return reject("pid", *rule.pid, who->pid);
  return {};
}

status send_fds(int socket, const std::vector<owned_fd>& fds, const void* payload, std::size_t payload_size,
                std::chrono::milliseconds timeout) {
  std::vector<int> raw(fds.size());
  std::transform(fds.begin(), fds.end(), raw.begin(), [](const owned_fd& fd) { return fd.get(); });
  return send_fds(socket, raw.data(), raw.size(), payload, payload_size, timeout);
}

result<received> receive_exactly(int socket, std::size_t fd_count, std::size_t max_payload,
                                 std::chrono::milliseconds timeout, const peer_rule* rule) {
  auto args = [&] { return fmt::format("socket={}, fd_count={}, max_payload={}", socket, fd_count, max_payload); };
  const detail::operation op{"pvmm::ipc::receive_exactly", args};
  // One more than expected is room enough to tell "too many" from "exactly", without taking unbounded fds.
  auto got = receive_fds(socket, fd_count < max_fds_per_message ? fd_count + 1 : fd_count, max_payload, timeout, rule);
  if (!got) return op.wrap(std::move(got).error());
  if (got->fds.size() != fd_count)
    return op.fail(errc::protocol_error,
                   fmt::format("the message carried {} fd(s), {} expected", got->fds.size(), fd_count));
  return got;
}

result<owned_fd> take_fd_from_process(pid_t pid, int remote_fd) {
  auto args = [&] { return fmt::format("pid={}, fd={}", pid, remote_fd); };
  const detail::operation op{"pvmm::ipc::take_fd_from_process", args};
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    int err = errno;
    error e = system_failure(op, err, "pidfd_open");
    e.code = err == ENOSYS ? errc::not_supported : err == ESRCH ? errc::invalid_argument : errc::system_error;
    if (err == ENOSYS) e.hint = "pidfd_open needs Linux 5.3 and pidfd_getfd Linux 5.6; pass the fd over a socket";
    return e;
  }
  int fd = static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, remote_fd, 0));
  int err = errno;
  ::close(pidfd);
  if (fd >= 0) return owned_fd(fd);
  error e = system_failure(op, err, "pidfd_getfd");
  switch (err) {
    case EPERM: {
      e.code = errc::not_permitted;
      int scope = -1;
      if (std::FILE* f = std::fopen("/proc/sys/kernel/yama/ptrace_scope", "r")) {
        if (std::fscanf(f, "%d", &scope) != 1) scope = -1;
        std::fclose(f);
      }
      e.hint = fmt::format(
          "pidfd_getfd needs ptrace access to process {}: kernel.yama.ptrace_scope is {} (0 allows the same user, "
          "1 only descendants, 2 only CAP_SYS_PTRACE, 3 nobody); grant CAP_SYS_PTRACE, have the target call "
          "prctl(PR_SET_PTRACER, <this pid>), run both in the same user namespace, or pass the fd over a socket",
          pid, scope < 0 ? std::string("unknown (no Yama)") : std::to_string(scope));
      break;
    }
    case EBADF:
      e.code = errc::invalid_argument;
      e.detail += fmt::format(" (process {} has no fd {})", pid, remote_fd);
      break;
    case ESRCH:
      e.code = errc::invalid_argument;
      break;
    case ENOSYS:
      e.code = errc::not_supported;
      e.hint = "pidfd_getfd needs Linux 5.6; pass the fd over a socket";
      break;
    default:
      break;
  }
  return e;
}

result<received> receive_fds(int socket, std::size_t max_fds, std::size_t max_payload,
                             std::chrono::milliseconds timeout, const peer_rule* rule) {
  auto args = [&] { return fmt::format("socket={}, max_fds={}, max_payload={}", socket, max_fds, max_payload); };
  const detail::operation op{"pvmm::ipc::receive_fds", args};
  if (auto ok = check_timeout(timeout, op); !ok) return std::move(ok).error();
  if (auto ok = check_socket_type(socket, op); !ok) return std::move(ok).error();
  // No message carries more than SCM_MAX_FD fds, so a larger limit changes nothing and cannot overflow.
  const std::size_t fd_room = std::min(max_fds, scm_max_fd);
  if (auto ok = wait_for(socket, POLLIN, timeout, op); !ok) return std::move(ok).error();

  PVMM_TRY_ASSIGN(length, peek_length(socket, fd_room, op));
  // send_fds sends one zero byte for an empty payload (a message needs a byte to carry fds).
  const std::size_t room = std::max<std::size_t>(std::min(length, max_payload), 1);
  received out;
  try {
    out.payload.resize(room);
  } catch (const std::exception&) {
    return op.fail(errc::out_of_memory, fmt::format("no memory for a {}-byte message", room));
  }
  iovec iov{out.payload.data(), out.payload.size()};
  alignas(cmsghdr) char control[control_room(scm_max_fd)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = control_room(fd_room);
  ssize_t n;
  do n = ::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n < 0) return system_failure(op, errno, "recvmsg");
  take_fds(msg, out.fds);
  // Fds freed by the peek were taken by another thread before this receive: the message is gone, say why.
  if (const int err = out_of_fds_for(msg, out.fds.size(), fd_room))
    return op.wrap(
        detail::fd_exhaustion_error("recvmsg", err, "no fd slot for the message's fds; they were discarded"));
  if (n == 0) {  // EOF: the peer closed its end or its process exited (issue 27: said at once, as peer_lost)
    std::string who;
    if (auto cred = query_peer(socket)) who = fmt::format(" (pid {})", cred->pid);
    return op.fail(errc::peer_lost, fmt::format("the peer{} closed the connection", who));
  }
  if (rule)
    if (auto ok = check_peer(socket, *rule); !ok) return std::move(ok).error();
  if (out.fds.size() > max_fds || (msg.msg_flags & MSG_CTRUNC))
    return op.fail(errc::protocol_error,
                   fmt::format("the peer sent more than {} fd(s){}; all were closed", max_fds,
                               msg.msg_flags & MSG_CTRUNC ? " (the kernel discarded the ones that did not fit)" : ""));
  const bool placeholder = max_payload == 0 && n == 1 && out.payload[0] == 0;
  const bool too_long = (msg.msg_flags & MSG_TRUNC) || static_cast<std::size_t>(length) > max_payload;
  if (too_long && !placeholder)
    return op.fail(errc::protocol_error,
                   fmt::format("the message was {} bytes, longer than max_payload {}", length, max_payload));
  out.payload.resize(placeholder ? 0 : static_cast<std::size_t>(n));
  return out;
}

}  // namespace pvmm::ipc
