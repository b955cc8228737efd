// Host backend, feature "testing": copies are memcpy; a faulting write is probed in a child process.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "backend/testing.hpp"

namespace pvmm::detail::backend {

status copy_to_mapping(void* destination, const void* source, std::size_t size, int) {
  std::memcpy(destination, source, size);
  return {};
}

status copy_from_mapping(void* destination, const void* source, std::size_t size, int) {
  std::memcpy(destination, source, size);
  return {};
}

result<bool> write_faults(void* address) {
  // Probe in a child so a fault ends the child, not the caller.
  pid_t pid = ::fork();
  if (pid < 0) return errno_error(errc::system_error, "fork", errno);
  if (pid == 0) {
    ::signal(SIGSEGV, SIG_DFL);
    ::signal(SIGBUS, SIG_DFL);
    *static_cast<volatile unsigned char*>(address) = 0xA5;
    ::_exit(0);
  }
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0) {
    if (errno != EINTR) return errno_error(errc::system_error, "waitpid", errno);
  }
  return WIFSIGNALED(st) && (WTERMSIG(st) == SIGSEGV || WTERMSIG(st) == SIGBUS);
}

}  // namespace pvmm::detail::backend
