// Host backend, feature "posix_fd": export = a dup of the memfd; import = an fd that must be a pvmm memfd,
// sealed against shrinking and growing, whose name says where it lives.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>

#include <pvmm/owned_fd.hpp>

#include "backend/posix_fd.hpp"
#include "core/propagate.hpp"
#include "host.hpp"

namespace pvmm::detail::backend {

result<allocation_properties> host::decode_properties(int fd) {
  char link[128];
  ssize_t n = ::readlink(fmt::format("/proc/self/fd/{}", fd).c_str(), link, sizeof(link) - 1);
  if (n < 0) return errno_error(errc::invalid_handle, "readlink(/proc/self/fd)", errno);
  link[n] = '\0';
  char kind = 0;
  int id = 0;
  unsigned exportable = 0;
  if (std::sscanf(link, "/memfd:pvmm-%c%d-x%u", &kind, &id, &exportable) != 3)
    return make_error(errc::invalid_handle, fmt::format("fd {} is not pvmm host memory ({})", fd, link));
  // The name came from another process: accept only what create() could have written.
  const bool known_location =
      (kind == 'd' && id == 0) || (kind == 'h' && id == 0) || (kind == 'n' && numa_node_exists(id));
  if (!known_location)
    return make_error(errc::invalid_handle, fmt::format("fd {} names location '{}{}', which does not exist on this "
                                                        "host ({})",
                                                        fd, kind, id, link));
  if ((exportable & ~static_cast<unsigned>(handle_types::posix_fd | handle_types::fabric)) != 0)
    return make_error(errc::invalid_handle,
                      fmt::format("fd {} names unknown handle type bits {:#x} ({})", fd, exportable, link));
  allocation_properties p;
  p.location = kind == 'h' ? location::host() : kind == 'n' ? location::host_numa(id) : location::device(id);
  p.exportable = static_cast<handle_types>(exportable);
  return p;
}

status host::check_size_seals(int fd, const char* what) {
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0)
    return errno_error(errc::invalid_handle, "fcntl(F_GET_SEALS)", errno,
                       fmt::format("fd {} is not a memfd, so not {} exported by pvmm", fd, what));
  constexpr int required = F_SEAL_SHRINK | F_SEAL_GROW;
  if ((seals & required) == required) return {};
  const char* missing = (seals & required) == 0        ? "shrinking and growing"
                        : (seals & F_SEAL_SHRINK) == 0 ? "shrinking"
                                                       : "growing";
  return make_error(
      errc::invalid_handle,
      fmt::format("fd {} is not sealed against {} (seals {:#x}); its owner could truncate it and crash "
                  "this process at its next access to the {}",
                  fd, missing, seals, what),
      fmt::format("import only {} exported by pvmm (memfds sealed with F_SEAL_SHRINK | F_SEAL_GROW)", what));
}

result<bool> posix_fd_capability(int) { return true; }

result<int> export_posix_fd(allocation_handle handle) {
  int fd = ::fcntl(static_cast<int>(handle.value), F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return errno_error(errc::system_error, "fcntl(F_DUPFD_CLOEXEC)", errno);
  return fd;
}

result<allocation_handle> import_posix_fd(int fd, std::size_t size) {
  PVMM_TRY(host::check_size_seals(fd, "memory"));
  struct stat st {};
  if (::fstat(fd, &st) != 0) return errno_error(errc::invalid_handle, "fstat", errno);
  if (static_cast<std::size_t>(st.st_size) != size)
    return make_error(errc::invalid_argument,
                      fmt::format("size {:#x} differs from the exported allocation's size {:#x}", size,
                                  static_cast<std::size_t>(st.st_size)));
  owned_fd own(::fcntl(fd, F_DUPFD_CLOEXEC, 0));  // closed should anything below fail or throw
  if (!own.valid()) return errno_error(errc::system_error, "fcntl(F_DUPFD_CLOEXEC)", errno);
  if (auto p = host::decode_properties(own.get()); !p) return std::move(p).error();
  return allocation_handle{static_cast<std::uint64_t>(own.detach())};
}

}  // namespace pvmm::detail::backend
