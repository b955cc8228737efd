// HIP backend, feature "dmabuf": hipMemGetHandleForAddressRange(hipMemRangeHandleTypeDmaBufFd) over a mapped VMM
// range, where the headers pvmm builds against declare it (HIP 7.0; CMake's PVMM_HIP_HAS_HANDLE_FOR_ADDRESS_RANGE).
// On HIP's NVIDIA platform the call maps onto cuMemGetHandleForAddressRange. HIP has no device attribute saying
// whether the kernel driver exports dma-bufs, so the capability says the call exists and the runtime answers at
// export (as for fabric handles). Headers without the call (ROCm 6.x, HIP's NVIDIA-platform headers up to 6.x):
// errc::not_supported naming what is missing.
#include <cstddef>

#include "backend/dmabuf.hpp"
#include "runtime.hpp"

namespace pvmm::detail::backend {
using namespace hip;

#if PVMM_HIP_HAS_HANDLE_FOR_ADDRESS_RANGE

result<bool> dmabuf_capability(int) { return true; }

result<int> export_dmabuf(void* address, std::size_t size, int device) {
  PVMM_REQUIRE_RUNTIME();
  return on_device(device, [&]() -> result<int> {  // HIP on NVIDIA: the CUDA call needs the device's context
    int fd = -1;
    PVMM_HIP(hipMemGetHandleForAddressRange, &fd, to_hip(address), size, hipMemRangeHandleTypeDmaBufFd, 0);
    return fd;
  });
}

#else

result<bool> dmabuf_capability(int) { return false; }

result<int> export_dmabuf(void*, std::size_t, int) {
  return make_error(errc::not_supported,
                    "the hip backend cannot export dma-bufs: the HIP headers it was built against lack "
                    "hipMemGetHandleForAddressRange (HIP 7.0)",
                    "rebuild against HIP 7.0 or later (PVMM_HIP_ROOT), or use the cuda backend on NVIDIA GPUs");
}

#endif

}  // namespace pvmm::detail::backend
