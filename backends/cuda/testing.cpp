// CUDA backend, feature "testing": synchronous copies in the chosen device's primary context (the caller's own
// context is current again afterwards).
#include "backend/testing.hpp"
#include "driver.hpp"

namespace pvmm::detail::backend {
using namespace pvmm::cuda;

status copy_to_mapping(void* destination, const void* source, std::size_t size, int device) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY_ASSIGN(scope, context_scope::primary(device));
  PVMM_CU(cuMemcpyHtoD, ptr(destination), source, size);
  // A copy from pageable memory may return before its DMA lands: finish it, so an unmap right after is safe.
  if (CUresult rc = api().cuCtxSynchronize(); rc != CUDA_SUCCESS) return failure(rc, "cuCtxSynchronize");
  return {};
}

status copy_from_mapping(void* destination, const void* source, std::size_t size, int device) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY_ASSIGN(scope, context_scope::primary(device));
  PVMM_CU(cuMemcpyDtoH, destination, ptr(source), size);
  return {};
}

result<bool> write_faults(void*) {
  return make_error(errc::not_supported,
                    "a faulting device write would poison the CUDA context; pvmm checks the grant instead");
}

}  // namespace pvmm::detail::backend
