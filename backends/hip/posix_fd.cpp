// HIP backend, feature "posix_fd": hipMemExportToShareableHandle / hipMemImportFromShareableHandle (ROCm 6.2+).
#include "backend/posix_fd.hpp"
#include "runtime.hpp"

namespace pvmm::detail::backend {
using namespace hip;

result<bool> posix_fd_capability(int) {
  PVMM_REQUIRE_RUNTIME();
  return runtime().version >= first_working_ipc;
}

result<int> export_posix_fd(allocation_handle handle) {
  PVMM_REQUIRE_RUNTIME();
  int fd = -1;
  PVMM_HIP(hipMemExportToShareableHandle, &fd, to_hip(handle), hipMemHandleTypePosixFileDescriptor, 0);
  return fd;
}

result<allocation_handle> import_posix_fd(int fd, std::size_t) {
  PVMM_REQUIRE_RUNTIME();
  native_handle h{};
  void* os_handle = reinterpret_cast<void*>(static_cast<std::uintptr_t>(fd));  // the fd by value
  if (hipError_t rc = hipMemImportFromShareableHandle(&h, os_handle, hipMemHandleTypePosixFileDescriptor);
      rc != hipSuccess)
    return failure(rc, "hipMemImportFromShareableHandle", "pass an fd exported by hipMemExportToShareableHandle",
                   rc == hipErrorOutOfMemory ? errc{} : errc::invalid_handle);
  return from_hip(h);
}

}  // namespace pvmm::detail::backend
