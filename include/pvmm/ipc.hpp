// pvmm/ipc.hpp - passing file descriptors between processes over Unix domain sockets (SCM_RIGHTS).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include <pvmm/error.hpp>
#include <pvmm/owned_fd.hpp>

namespace pvmm::ipc {

/// A timeout that waits without limit. Timeouts are milliseconds >= 0 (0 polls once; negative is
/// errc::invalid_argument); any length is honoured, however long.
inline constexpr std::chrono::milliseconds wait_forever = std::chrono::milliseconds::max();

/// At most this many fds travel in one message (the kernel's SCM_MAX_FD).
inline constexpr std::size_t max_fds_per_message = 253;

/// Sends `fds` (borrowed; still owned by the caller) and `payload` in one message over a connected
/// AF_UNIX socket with message boundaries (SOCK_SEQPACKET or SOCK_DGRAM; SOCK_STREAM is refused with
/// errc::invalid_argument). Fails with errc::timeout when the peer does not take it within `timeout`.
status send_fds(int socket, const int* fds, std::size_t count, const void* payload, std::size_t payload_size,
                std::chrono::milliseconds timeout = std::chrono::milliseconds(10000));

/// send_fds with fds held by owners (export_buffer's, receive_fds'); they stay the caller's.
status send_fds(int socket, const std::vector<owned_fd>& fds, const void* payload, std::size_t payload_size,
                std::chrono::milliseconds timeout = std::chrono::milliseconds(10000));

/// What one received message held. Every received fd is owned.
struct received {
  std::vector<owned_fd> fds;
  std::vector<std::uint8_t> payload;
};

/// Who the peer must be (SO_PEERCRED): every field that is set must match.
struct peer_rule {
  std::optional<uid_t> uid;
  std::optional<gid_t> gid;
  std::optional<pid_t> pid;
  /// The peer runs as this process's effective user.
  static peer_rule same_user();
};

/// The connected peer's process, user and group, as the kernel recorded them at connect time.
struct peer_credentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};
result<peer_credentials> query_peer(int socket);
/// Fails with errc::peer_rejected, naming the field that differs, unless the peer satisfies `rule`.
status check_peer(int socket, const peer_rule& rule);

/// Receives one message with up to `max_fds` fds and up to `max_payload` bytes. The buffer is sized by the
/// message that arrived, so any limit (SIZE_MAX too) is safe. Fails with errc::timeout; errc::peer_lost when the
/// peer closed; errc::protocol_error when it sent more fds than `max_fds` or a message longer than `max_payload` (the
/// whole message is taken, so the next receive starts at the next message); errc::peer_rejected when `rule` is given
/// and the peer does not satisfy it; errc::invalid_argument for a SOCK_STREAM socket or a negative timeout. Received
/// fds are closed in every failure. Works whether or not SO_PASSCRED is set on the socket.
result<received> receive_fds(int socket, std::size_t max_fds, std::size_t max_payload,
                             std::chrono::milliseconds timeout = std::chrono::milliseconds(10000),
                             const peer_rule* rule = nullptr);

/// receive_fds of a message that must carry exactly `fd_count` fds: fewer or more is errc::protocol_error
/// (saying how many arrived), with every received fd closed.
result<received> receive_exactly(int socket, std::size_t fd_count, std::size_t max_payload,
                                 std::chrono::milliseconds timeout = std::chrono::milliseconds(10000),
                                 const peer_rule* rule = nullptr);

/// Duplicates file descriptor `remote_fd` of process `pid` into this process (pidfd_open + pidfd_getfd,
/// Linux 5.6+). Needs ptrace access to the target: the same user with kernel.yama.ptrace_scope 0 (or the
/// target being a descendant with scope 1), or CAP_SYS_PTRACE, in the same or an ancestor user namespace.
/// Fails with errc::not_permitted naming what is missing, errc::not_supported on older kernels,
/// errc::invalid_argument for a process or fd that does not exist.
result<owned_fd> take_fd_from_process(pid_t pid, int remote_fd);

}  // namespace pvmm::ipc
