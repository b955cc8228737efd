// SCM_RIGHTS transport: the part every communication runtime writes by hand.
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include <pvmm/ipc.hpp>

#include "state.hpp"

namespace pvmm::ipc {
namespace {

error system_failure(const char* op, detail::lazy_args args, int err, const char* call) {
  return detail::in_operation(detail::errno_error(errc::system_error, call, err), op, args);
}

/// Waits for `events` on `socket`; timeout/hang-up reported as errors.
status wait_for(int socket, short events, std::chrono::milliseconds timeout, const char* op, detail::lazy_args args) {
  pollfd p{socket, events, 0};
  for (;;) {
    int n = ::poll(&p, 1, static_cast<int>(timeout.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return system_failure(op, args, errno, "poll");
    if (n == 0)
      return detail::make_error(errc::timeout, op, args,
                                fmt::format("the peer did not respond within {} ms", timeout.count()));
    if (p.revents & POLLNVAL) return system_failure(op, args, EBADF, "poll (the socket is not open)");
    return {};
  }
}

}  // namespace

status send_fds(int socket, const int* fds, std::size_t count, const void* payload, std::size_t payload_size,
                std::chrono::milliseconds timeout) {
  const char* op = "pvmm::ipc::send_fds";
  auto args = [&] { return fmt::format("socket={}, fds={}, payload={} bytes", socket, count, payload_size); };
  constexpr std::size_t max_fds = 253;  // SCM_MAX_FD
  if (count > max_fds)
    return detail::make_error(errc::invalid_argument, op, args, fmt::format("at most {} fds per message", max_fds));
  if (count > 0 && fds == nullptr) return detail::make_error(errc::invalid_argument, op, args, "fds is null");
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
  if (auto ok = wait_for(socket, POLLOUT, timeout, op, args); !ok) return ok;
  for (;;) {
    ssize_t n = ::sendmsg(socket, &msg, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return system_failure(op, args, errno, "sendmsg");
    if (static_cast<std::size_t>(n) != iov.iov_len)
      return detail::make_error(errc::protocol_error, op, args, "the message was sent only in part");
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
  if (::getsockopt(socket, SOL_SOCKET, SO_PEERCRED, &c, &len) != 0)
    return system_failure(
        "pvmm::ipc::query_peer", [&] { return fmt::format("socket={}", socket); }, errno, "getsockopt(SO_PEERCRED)");
  return peer_credentials{c.pid, c.uid, c.gid};
}

status check_peer(int socket, const peer_rule& rule) {
  const char* op = "pvmm::ipc::check_peer";
  auto args = [&] { return fmt::format("socket={}", socket); };
  auto who = query_peer(socket);
  if (!who) return std::move(who).error();
  auto reject = [&](const char* field, long long want, long long got) {
    return detail::make_error(errc::peer_rejected, op, args,
                              fmt::format("the peer's {} is {}, the rule requires {}", field, got, want));
  };
  if (rule.uid && *rule.uid != who->uid) return reject("uid", *rule.uid, who->uid);
  if (rule.gid && *rule.gid != who->gid) return reject("gid", *rule.gid, who->gid);
  if (rule.pid && *rule.pid != who->pid) return reject("pid", *rule.pid, who->pid);
  return {};
}

result<exported_fd> take_fd_from_process(pid_t pid, int remote_fd) {
  const char* op = "pvmm::ipc::take_fd_from_process";
  auto args = [&] { return fmt::format("pid={}, fd={}", pid, remote_fd); };
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    int err = errno;
    error e = system_failure(op, args, err, "pidfd_open");
    e.code = err == ENOSYS ? errc::not_supported : err == ESRCH ? errc::invalid_argument : errc::system_error;
    if (err == ENOSYS) e.hint = "pidfd_open needs Linux 5.3 and pidfd_getfd Linux 5.6; pass the fd over a socket";
    return e;
  }
  int fd = static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, remote_fd, 0));
  int err = errno;
  ::close(pidfd);
  if (fd >= 0) return exported_fd(fd);
  error e = system_failure(op, args, err, "pidfd_getfd");
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
  const char* op = "pvmm::ipc::receive_fds";
  auto args = [&] { return fmt::format("socket={}, max_fds={}, max_payload={}", socket, max_fds, max_payload); };
  received out;
  out.payload.resize(max_payload ? max_payload : 1);
  iovec iov{out.payload.data(), out.payload.size()};
  std::vector<char> control(CMSG_SPACE(sizeof(int) * (max_fds ? max_fds : 1)));
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  if (auto ok = wait_for(socket, POLLIN, timeout, op, args); !ok) return std::move(ok).error();
  ssize_t n;
  do n = ::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n < 0) return system_failure(op, args, errno, "recvmsg");
  // Own every fd that arrived before judging the message, so none leaks on a rejection below.
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    std::size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < k; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      out.fds.emplace_back(fd);
    }
  }
  if (n == 0) return detail::make_error(errc::protocol_error, op, args, "the peer closed the connection");
  if (rule)
    if (auto ok = check_peer(socket, *rule); !ok) return std::move(ok).error();
  if (msg.msg_flags & MSG_CTRUNC)
    return detail::make_error(errc::protocol_error, op, args,
                              fmt::format("the peer sent more than {} fds; the extra ones were discarded", max_fds));
  if (msg.msg_flags & MSG_TRUNC)
    return detail::make_error(errc::protocol_error, op, args,
                              fmt::format("the message was longer than {} bytes", max_payload));
  out.payload.resize(max_payload ? static_cast<std::size_t>(n) : 0);
  return out;
}

}  // namespace pvmm::ipc
