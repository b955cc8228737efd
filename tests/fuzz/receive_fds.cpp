// Fuzz target: ipc::receive_fds against a hostile peer. The input chooses the socket type, what the peer
// sends (fds, a credentials message, payload bytes) and the receiver's limits and socket options.
// Invariants: no crash, no hang (timeout 0), never more fds than max_fds, never a payload past max_payload,
// every fd that arrived is closed once the result is gone.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <limits>
#include <vector>

#include <pvmm/ipc.hpp>

#include "common.hpp"

namespace {
constexpr int socket_types[] = {SOCK_SEQPACKET, SOCK_DGRAM, SOCK_STREAM};
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  pvmm_fuzz::input in{data, size};
  const int type = socket_types[in.byte() % 3];
  const std::size_t fds_sent = in.byte() % 12;
  const std::uint8_t limits = in.byte();
  const std::size_t max_fds = (limits & 0x0f) == 0x0f ? std::numeric_limits<std::size_t>::max() : (limits & 0x0f) % 10;
  const std::uint8_t payload_limit = in.byte();
  const std::size_t max_payload = payload_limit == 0xff ? std::numeric_limits<std::size_t>::max() : payload_limit;
  const std::uint8_t options = in.byte();

  const std::size_t before = pvmm_fuzz::open_fd_count();
  {
    int sv[2];
    if (::socketpair(AF_UNIX, type | SOCK_CLOEXEC, 0, sv) != 0) return 0;
    if (options & 1) {
      int on = 1;
      (void)::setsockopt(sv[1], SOL_SOCKET, SO_PASSCRED, &on, sizeof on);
    }
    std::vector<int> fds;
    for (std::size_t i = 0; i < fds_sent; ++i) fds.push_back(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    // The peer's message: the rest of the input as payload, fds in SCM_RIGHTS, and (if asked) its
    // credentials in a second control message, in either order.
    std::vector<std::uint8_t> payload(in.data, in.data + in.size);
    if (payload.empty()) payload.push_back(0);
    iovec iov{payload.data(), payload.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 12) + CMSG_SPACE(sizeof(ucred))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    std::size_t used = 0;
    auto add_rights = [&] {
      if (fds.empty()) return;
      auto* c = reinterpret_cast<cmsghdr*>(control + used);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
      used += CMSG_SPACE(sizeof(int) * fds.size());
    };
    auto add_credentials = [&] {
      if (!(options & 2)) return;
      auto* c = reinterpret_cast<cmsghdr*>(control + used);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_CREDENTIALS;
      c->cmsg_len = CMSG_LEN(sizeof(ucred));
      ucred who{::getpid(), ::geteuid(), ::getegid()};
      std::memcpy(CMSG_DATA(c), &who, sizeof who);
      used += CMSG_SPACE(sizeof(ucred));
    };
    if (options & 4) {
      add_credentials();
      add_rights();
    } else {
      add_rights();
      add_credentials();
    }
    msg.msg_controllen = used;
    if (used == 0) msg.msg_control = nullptr;
    (void)::sendmsg(sv[0], &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    for (int fd : fds) ::close(fd);
    if (options & 8) ::shutdown(sv[0], SHUT_WR);

    auto got = pvmm::ipc::receive_fds(sv[1], max_fds, max_payload, std::chrono::milliseconds(0));
    if (got) {
      if (got->fds.size() > max_fds) pvmm_fuzz::finding("more fds than max_fds");
      if (got->payload.size() > max_payload) pvmm_fuzz::finding("a payload longer than max_payload");
      for (auto& fd : got->fds)
        if (!fd.valid()) pvmm_fuzz::finding("an invalid fd in a successful result");
    }
    ::close(sv[0]);
    ::close(sv[1]);
  }
  if (pvmm_fuzz::open_fd_count() != before) pvmm_fuzz::finding("fds leaked");
  return 0;
}
