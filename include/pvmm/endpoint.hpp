// pvmm/endpoint.hpp - named endpoints for the fd transport: a process listens on a name, its peers connect to
// it (the pattern of cuda-samples' memMapIPCDrv), without any socket code of the user's own.
//
// Names come in two forms; a name starting with '/' is a path, any other is abstract:
// - abstract ("my-app-rank0"): Linux's abstract Unix socket namespace. Nothing appears on the filesystem, a name
//   is free again the moment its listener closes, and nothing is left behind by a process that dies. But abstract
//   names belong to a network namespace: a peer in another one (another container, `unshare -n`, a pod without
//   hostNetwork) cannot see the listener, and its connect waits for its deadline. Use them between processes of
//   one network namespace (one job on one host, the default).
// - path ("/run/user/1000/my-app.sock"): a socket file. It reaches every process that sees the file, whatever its
//   network namespace (a shared volume between containers), and the directory's permissions add a check. Use it
//   across containers and network namespaces; runtime_directory() gives a directory only this user can reach.
//   A listener removes its file when it goes (only if the file is still the one it bound). A file left by a process
//   that died is removed by the next listen() on that path when it is a socket of this user on which nobody
//   listens (connect is refused); a file that is not a socket, or another user's, is never removed.
// Either form has 1 to max_endpoint_name bytes and no NUL byte. Any process that reaches a name may connect, which
// is why both sides check who the other is (SO_PEERCRED) and, unless told otherwise, accept only the same user.
//
// Threading: a listener or connection may be used by one thread at a time; different ones are independent. Its
// abort() may be called from any thread, also while another thread waits in it (a watchdog giving up on a peer).
// runtime_directory() may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <pvmm/error.hpp>
#include <pvmm/ipc.hpp>
#include <pvmm/owned_fd.hpp>

namespace pvmm::ipc {

/// The longest endpoint name (sun_path less the abstract namespace's leading NUL, or less a path's terminating NUL).
inline constexpr std::size_t max_endpoint_name = 107;

/// Whether `name` is a path name (it starts with '/') rather than an abstract one.
constexpr bool is_path_name(std::string_view name) noexcept { return !name.empty() && name.front() == '/'; }

/// A directory for path-name endpoints that only this user can reach: $XDG_RUNTIME_DIR when it is set to an
/// absolute path, else /tmp/pvmm-<euid> (created with mode 0700 when missing). It must be a directory (not a
/// symbolic link) owned by this user that no other user may enter: errc::not_permitted naming the directory and
/// what is wrong otherwise (pvmm does not change it). Names built from it must still fit max_endpoint_name.
result<std::string> runtime_directory();

/// One end of a connection between two processes (AF_UNIX, SOCK_SEQPACKET: one send is one message). Owns its
/// socket; move-only. Every call takes a timeout with the transport's rules (milliseconds >= 0, wait_forever).
class connection {
 public:
  connection() noexcept = default;
  /// Adopts a connected AF_UNIX socket with message boundaries.
  explicit connection(owned_fd socket) noexcept : socket_(std::move(socket)) {}
  connection(connection&& other) noexcept;
  connection& operator=(connection&& other) noexcept;
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;
  ~connection() = default;

  status send(const int* fds, std::size_t count, const void* payload, std::size_t payload_size,
              std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) const;
  status send(const std::vector<owned_fd>& fds, const void* payload, std::size_t payload_size,
              std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) const;
  result<received> receive(std::size_t max_fds, std::size_t max_payload,
                           std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) const;
  result<received> receive_exactly(std::size_t fd_count, std::size_t max_payload,
                                   std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) const;
  /// Who is at the other end, as the kernel recorded it when the connection was made.
  result<peer_credentials> peer() const { return query_peer(socket_.get()); }

  /// Ends the connection from any thread: a send or receive waiting on it returns errc::peer_lost at once
  /// ("aborted"), every later one too, and the peer sees the connection closed (peer_lost) at once. The socket stays
  /// open (and owned) until the connection goes, so its number is never reused under a thread still in a call.
  void abort() noexcept;
  bool aborted() const noexcept { return aborted_.load(std::memory_order_acquire); }

  int native_handle() const noexcept { return socket_.get(); }
  bool valid() const noexcept { return socket_.valid(); }
  explicit operator bool() const noexcept { return valid(); }

 private:
  owned_fd socket_;
  std::atomic<bool> aborted_{false};
};

/// Listens on a name; accepts connections one at a time. Owns its socket (and, for a path name, its socket file);
/// move-only; the name is free again when it goes.
class listener {
 public:
  listener() noexcept = default;
  listener(listener&& other) noexcept;
  listener& operator=(listener&& other) noexcept;
  listener(const listener&) = delete;
  listener& operator=(const listener&) = delete;
  /// Closes the socket; a path-name listener first removes its socket file if it is still the one it bound.
  ~listener();

  /// Listens on `name` (1 to max_endpoint_name bytes, no NUL byte; a path when it starts with '/'). Errors:
  /// errc::address_unavailable when a listener has the name (for a path: one answers a connect, naming its pid);
  /// errc::invalid_argument for a bad name, or a path whose file exists and is not a socket; errc::not_permitted
  /// for a path whose socket file belongs to another user; errc::system_error when the path's directory refuses
  /// (missing, no permission). A socket file of this user on which nobody listens is removed and the path bound.
  static result<listener> listen(std::string_view name, int backlog = 64);

  /// Accepts the next connection within `timeout` (errc::timeout otherwise). A peer that does not satisfy
  /// `rule` is disconnected and errc::peer_rejected returned, naming what differs; accept again for the next.
  result<connection> accept(std::chrono::milliseconds timeout = std::chrono::milliseconds(10000),
                            const peer_rule& rule = peer_rule::same_user()) const;

  /// Stops accepting, from any thread: an accept waiting on it returns errc::peer_lost at once ("aborted"), and every
  /// later one too; connects to the name are refused from then on. The name stays taken until the listener goes.
  void abort() noexcept;
  bool aborted() const noexcept { return aborted_.load(std::memory_order_acquire); }

  const std::string& name() const noexcept { return name_; }
  int native_handle() const noexcept { return socket_.get(); }
  bool valid() const noexcept { return socket_.valid(); }
  explicit operator bool() const noexcept { return valid(); }

 private:
  /// The socket file a path-name listener bound (device and inode numbers; zero for an abstract name).
  struct bound_file {
    std::uint64_t device = 0;
    std::uint64_t inode = 0;
  };
  listener(owned_fd socket, std::string name, bound_file file) noexcept
      : socket_(std::move(socket)), name_(std::move(name)), file_(file) {}
  void remove_file() noexcept;
  owned_fd socket_;
  std::string name_;
  bound_file file_;
  std::atomic<bool> aborted_{false};
};

/// Connects to the listener on `name`, waiting for it to appear until `timeout` passes (peers start in any
/// order; a path's file may be missing or stale meanwhile): errc::timeout then, whose hint for an abstract name
/// says that abstract names do not cross network namespaces and to use a path name. The listener must satisfy
/// `rule` (errc::peer_rejected otherwise).
result<connection> connect(std::string_view name, std::chrono::milliseconds timeout = std::chrono::milliseconds(10000),
                           const peer_rule& rule = peer_rule::same_user());

}  // namespace pvmm::ipc
