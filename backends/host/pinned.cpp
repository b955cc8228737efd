// Host backend, feature "pinned": page-locked memory is mlock'd memory. Device 0 is the CPU, so the device pointer
// is the host pointer. A lock the system refuses (RLIMIT_MEMLOCK without CAP_IPC_LOCK) is out_of_memory with a hint.
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "backend/pinned.hpp"
#include "host.hpp"

namespace pvmm::detail::backend {
using namespace host;

namespace {
constexpr const char* memlock_hint =
    "the locked-memory limit (RLIMIT_MEMLOCK: ulimit -l, systemd's LimitMEMLOCK) is reached; raise it, or run with "
    "CAP_IPC_LOCK";

/// mlock over whole pages; the error names the limit when the kernel refused for it. The system call is made
/// directly: the sanitizers' runtimes intercept mlock and ignore it, which would make the lock (and its refusal)
/// vanish in the sanitizer builds.
status lock(void* pointer, std::size_t size) {
  if (::syscall(SYS_mlock, pointer, size) == 0) return {};
  const int err = errno;
  if (err == ENOMEM || err == EAGAIN || err == EPERM) {
    auto e = errno_error(errc::out_of_memory, "mlock", err, "page-locking host memory");
    e.hint = memlock_hint;
    return e;
  }
  return errno_error(errc::system_error, "mlock", err);
}
}  // namespace

result<capabilities::host_memory_features> host_memory_capabilities(int) {
  capabilities::host_memory_features f;
  f.pinned = true;
  f.registration = true;
  f.mapped = true;
  f.device_pointer_is_host_pointer = true;  // the device is the CPU
  return f;
}

result<void*> allocate_pinned(std::size_t size, const pinned_options&) {  // write_combined means nothing to a CPU
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return errno_error(errc::out_of_memory, "mmap", errno);
  if (auto locked = lock(p, size); !locked) {
    ::munmap(p, size);
    return std::move(locked).error();
  }
  return p;
}

status free_pinned(void* pointer, std::size_t size) {
  if (::munmap(pointer, size) != 0) return errno_error(errc::invalid_argument, "munmap", errno);  // unlocks too
  return {};
}

status register_host(void* pointer, std::size_t size, const pinned_options&) { return lock(pointer, size); }

status unregister_host(void* pointer, std::size_t size) {
  if (::syscall(SYS_munlock, pointer, size) != 0) return errno_error(errc::system_error, "munlock", errno);
  return {};
}

result<void*> host_device_pointer(void* pointer, int) { return pointer; }

}  // namespace pvmm::detail::backend
