// Path-name endpoints: see endpoint_path.hpp.
#include "sharing/endpoint_path.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include <fmt/format.h>

#include <pvmm/endpoint.hpp>

#include "sharing/ipc_wait.hpp"

namespace pvmm::ipc {
namespace path {

/// What a file is, for an error ("a regular file").
static const char* file_kind(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  return "not a socket";
}

namespace {

/// Whether a socket file is live: a connect that is taken (or finds the backlog full) means a listener has it.
/// A live listener accepts this connection, which closes at once. Answers the error listen() reports, or nothing
/// when the file is stale (connect refused: nobody listens).
status check_nobody_listens(std::string_view name, const sockaddr_un& address, socklen_t length,
                            const detail::operation& op) {
  owned_fd probe(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!probe) return wait::system_failure(op, errno, "socket(AF_UNIX, SOCK_SEQPACKET)");
  int rc;
  do rc = ::connect(probe.get(), reinterpret_cast<const sockaddr*>(&address), length);
  while (rc != 0 && errno == EINTR);
  if (rc != 0 && errno == ECONNREFUSED) return {};
  if (rc == 0 || errno == EAGAIN || errno == EPROTOTYPE) {
    std::string who;
    if (rc == 0)
      if (auto peer = query_peer(probe.get())) who = fmt::format(" (pid {})", peer->pid);
    return op.fail(errc::address_unavailable,
                   fmt::format("a listener{} has '{}'{}", who, name,
                               errno == EPROTOTYPE && rc != 0 ? " (a socket of another type)" : ""),
                   "choose another path, or connect to that listener");
  }
  return wait::system_failure(op, errno, "connect (probing whether anyone listens on the socket file)");
}

/// Makes the path free for bind: removes a stale socket file of this user; refuses anything else.
status remove_stale(std::string_view name, const sockaddr_un& address, socklen_t length, const detail::operation& op) {
  const std::string file(name);
  struct stat st {};
  if (::lstat(file.c_str(), &st) != 0) {
    if (errno == ENOENT) return {};  // gone meanwhile: bind again
    return wait::system_failure(op, errno, "lstat");
  }
  if (!S_ISSOCK(st.st_mode))
    return op.fail(
        errc::invalid_argument,
        fmt::format("'{}' exists and is {}: pvmm removes only stale socket files", name, file_kind(st.st_mode)),
        "choose another path (or remove the file, if it is yours to remove)");
  if (st.st_uid != ::geteuid())
    return op.fail(errc::not_permitted,
                   fmt::format("the socket file '{}' belongs to uid {}, not to this user ({}): pvmm removes only its "
                               "own user's stale socket files",
                               name, st.st_uid, ::geteuid()),
                   "choose another path, e.g. in pvmm::ipc::runtime_directory()");
  PVMM_TRY(check_nobody_listens(name, address, length, op));
  // Stale: its listener is gone. Remove it only if it is still the file examined.
  struct stat again {};
  if (::lstat(file.c_str(), &again) == 0 && again.st_dev == st.st_dev && again.st_ino == st.st_ino &&
      ::unlink(file.c_str()) != 0 && errno != ENOENT)
    return wait::system_failure(op, errno, "unlink (a stale socket file)");
  return {};
}

}  // namespace

result<file_identity> bind(int socket, std::string_view name, const sockaddr_un& address, socklen_t length,
                           const detail::operation& op) {
  for (int attempt = 0;; ++attempt) {
    if (::bind(socket, reinterpret_cast<const sockaddr*>(&address), length) == 0) break;
    if (const int err = errno; err != EADDRINUSE) {
      error e = wait::system_failure(op, err, "bind");
      if (err == ENOENT || err == EACCES)
        e.hint = "the path's directory must exist and be writable: pvmm::ipc::runtime_directory() gives one";
      return e;
    }
    if (attempt > 0)  // another listener took the path between the removal and this bind
      return op.fail(errc::address_unavailable, fmt::format("another listener took '{}'", name),
                     "choose another path, or connect to that listener");
    PVMM_TRY(remove_stale(name, address, length, op));
  }
  struct stat st {};
  if (::lstat(std::string(name).c_str(), &st) != 0) return wait::system_failure(op, errno, "lstat (the bound file)");
  return file_identity{static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino)};
}

void remove(const std::string& name, file_identity bound) noexcept {
  struct stat st {};
  if (::lstat(name.c_str(), &st) == 0 && S_ISSOCK(st.st_mode) &&
      static_cast<std::uint64_t>(st.st_dev) == bound.device && static_cast<std::uint64_t>(st.st_ino) == bound.inode)
    ::unlink(name.c_str());
}

}  // namespace path

result<std::string> runtime_directory() {
  const detail::operation op{"pvmm::ipc::runtime_directory"};
  const uid_t uid = ::geteuid();
  std::string dir;
  const char* from;
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg && xdg[0] == '/') {
    dir = xdg;
    from = "$XDG_RUNTIME_DIR";
  } else {
    dir = fmt::format("/tmp/pvmm-{}", uid);
    from = "the runtime directory";
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return wait::system_failure(op, errno, "mkdir");
  }
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return wait::system_failure(op, errno, "lstat");
  const std::string fix = "use a directory of this user's with mode 0700 (set XDG_RUNTIME_DIR to it)";
  if (!S_ISDIR(st.st_mode))
    return op.fail(errc::not_permitted,
                   fmt::format("{} '{}' is {}, not a directory", from, dir, path::file_kind(st.st_mode)), fix);
  if (st.st_uid != uid)
    return op.fail(errc::not_permitted,
                   fmt::format("{} '{}' belongs to uid {}, not to this user ({}): its owner could replace the "
                               "sockets in it",
                               from, dir, st.st_uid, uid),
                   fix);
  if ((st.st_mode & 077) != 0)
    return op.fail(errc::not_permitted,
                   fmt::format("{} '{}' has mode {:o}: other users may enter it", from, dir, st.st_mode & 0777), fix);
  return dir;
}

}  // namespace pvmm::ipc
