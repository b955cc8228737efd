// Feature "dmabuf" for a backend that lacks it: the host backend (its memory is a memfd, not a dma-buf; a NIC
// registers host memory directly with ibv_reg_mr). The hip backend answers for itself (backends/hip/dmabuf.cpp).
#include "backend/dmabuf.hpp"
#include "backend/unsupported/unsupported.hpp"

namespace pvmm::detail::backend {

result<bool> dmabuf_capability(int) { return false; }
result<int> export_dmabuf(void*, std::size_t, int) {
  return unsupported_feature("dma-buf export",
                             "host memory (the host backend's memfd, pinned or registered memory) is registered with "
                             "a NIC directly (ibv_reg_mr); dma-buf export is for device memory (CUDA: "
                             "cuMemGetHandleForAddressRange)");
}

}  // namespace pvmm::detail::backend
