// CUDA backend, feature "posix_fd": allocations exported and imported as POSIX fds.
#include "backend/posix_fd.hpp"
#include "driver.hpp"

namespace pvmm::detail::backend {
using namespace pvmm::cuda;

result<bool> posix_fd_capability(int ordinal) {
  return has_attribute(ordinal, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED);
}

result<int> export_posix_fd(allocation_handle handle) { return export_fd(handle.value); }

result<allocation_handle> import_posix_fd(int fd, std::size_t) {
  PVMM_TRY_ASSIGN(h, import_fd(fd, "pass an fd exported by cuMemExportToShareableHandle"));
  return allocation_handle{h};
}

}  // namespace pvmm::detail::backend
