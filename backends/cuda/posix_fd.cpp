// CUDA backend, feature "posix_fd": cuMemExportToShareableHandle / cuMemImportFromShareableHandle with fds.
#include "backend/posix_fd.hpp"
#include "driver.hpp"

namespace pvmm::detail::backend {
using namespace pvmm::cuda;

result<bool> posix_fd_capability(int ordinal) {
  PVMM_REQUIRE_DRIVER();
  CUdevice dev = 0;
  PVMM_CU(cuDeviceGet, &dev, ordinal);
  return attribute(dev, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED) != 0;
}

result<int> export_posix_fd(allocation_handle handle) {
  PVMM_REQUIRE_DRIVER();
  int fd = -1;
  PVMM_CU(cuMemExportToShareableHandle, &fd, handle.value, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  return fd;
}

result<allocation_handle> import_posix_fd(int fd, std::size_t) {
  PVMM_REQUIRE_DRIVER();
  CUmemGenericAllocationHandle h = 0;
  void* os_handle = reinterpret_cast<void*>(static_cast<std::uintptr_t>(fd));  // the fd by value
  if (CUresult rc = api().cuMemImportFromShareableHandle(&h, os_handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
      rc != CUDA_SUCCESS) {
    // The driver answers "invalid value" or "unknown" for an (open) fd that names no CUDA memory.
    return failure(rc, "cuMemImportFromShareableHandle", "pass an fd exported by cuMemExportToShareableHandle",
                   import_failure_code(rc));
  }
  return allocation_handle{h};
}

}  // namespace pvmm::detail::backend
