// Running out of file descriptors: see fd_budget.hpp.
#include "core/fd_budget.hpp"

#include <dirent.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace pvmm::detail {
namespace {

/// "1021 open" from /proc/self/fd; when even that directory cannot be opened (EMFILE), every fd number below the
/// soft limit is taken, so at least that many are open.
std::string open_count(const rlimit& limit) {
  if (DIR* d = ::opendir("/proc/self/fd")) {
    long n = -3;  // ".", ".." and the directory's own fd
    while (::readdir(d)) ++n;
    ::closedir(d);
    return fmt::format("{} open", n);
  }
  return limit.rlim_cur == RLIM_INFINITY ? std::string("all open") : fmt::format("{} or more open", limit.rlim_cur);
}

std::string limit_text(rlim_t value) {
  return value == RLIM_INFINITY ? std::string("unlimited") : std::to_string(value);
}

}  // namespace

bool is_fd_exhaustion(int err) noexcept { return err == EMFILE || err == ENFILE; }

int probe_fd_exhaustion() noexcept {
  const int fd = ::eventfd(0, EFD_CLOEXEC);
  if (fd >= 0) {
    ::close(fd);
    return 0;
  }
  return is_fd_exhaustion(errno) ? errno : 0;
}

error fd_exhaustion_error(const char* call, int err, const std::string& context) {
  rlimit limit{RLIM_INFINITY, RLIM_INFINITY};
  (void)::getrlimit(RLIMIT_NOFILE, &limit);
  const char* whose = err == ENFILE ? "the system is out of file descriptors (fs.file-max)" : "out of file descriptors";
  error e;
  e.code = errc::system_error;
  e.detail =
      fmt::format("{}{}{} failed: {}: {}, RLIMIT_NOFILE soft limit {} (hard {})", context, context.empty() ? "" : ": ",
                  call, whose, open_count(limit), limit_text(limit.rlim_cur), limit_text(limit.rlim_max));
  const char* name = strerrorname_np(err);
  e.native_name = name ? name : "errno";
  e.native_code = err;
  e.hint = fmt::format(
      "{}, or close fds. pvmm's fd budget: an exported fd (owned_fd) holds one until closed; an import holds none "
      "once it returns (the host backend: one per physical allocation or pool); a listener or connection holds one "
      "(docs/design.md, \"fd budget\")",
      err == ENFILE ? std::string("raise fs.file-max (sysctl)")
                    : fmt::format("raise the limit (ulimit -n, or setrlimit(RLIMIT_NOFILE) up to the hard limit {})",
                                  limit_text(limit.rlim_max)));
  return e;
}

error blame_fd_exhaustion(const char* call, error e) {
  if (e.native_name == "EMFILE" || e.native_name == "ENFILE") return e;  // said as such already (errno_error)
  const int err = probe_fd_exhaustion();
  if (err == 0) return e;
  error out = fd_exhaustion_error(call, err);
  out.detail += fmt::format(" (the backend reported {}{}{})", e.native_name.empty() ? to_string(e.code) : e.native_name,
                            e.detail.empty() ? "" : ": ", e.detail);
  out.operation = std::move(e.operation);
  out.arguments = std::move(e.arguments);
  return out;
}

}  // namespace pvmm::detail
