// CUDA backend, feature "dmabuf": cuMemGetHandleForAddressRange(CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD) over a mapped
// VMM range (CUDA 11.7; CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED says whether the device and kernel driver allow it).
#include <cstdint>

#include "backend/dmabuf.hpp"
#include "driver.hpp"

namespace pvmm::detail::backend {
using namespace pvmm::cuda;

result<bool> dmabuf_capability(int ordinal) {
  PVMM_TRY_ASSIGN(supported, has_attribute(ordinal, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED));
  return supported && api().cuMemGetHandleForAddressRange != nullptr;
}

result<int> export_dmabuf(void* address, std::size_t size, int device) {
  PVMM_REQUIRE_DRIVER();
  if (api().cuMemGetHandleForAddressRange == nullptr)
    return make_error(errc::not_supported, "the CUDA driver lacks cuMemGetHandleForAddressRange (CUDA 11.7)");
  PVMM_TRY_ASSIGN(scope, context_scope::primary(device));  // the call needs a context current
  int fd = -1;
  PVMM_CU(cuMemGetHandleForAddressRange, &fd, static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(address)), size,
          CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
  return fd;
}

}  // namespace pvmm::detail::backend
