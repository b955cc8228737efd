// HIP backend, feature "testing": synchronous copies on the chosen device.
#include "backend/testing.hpp"
#include "runtime.hpp"

namespace pvmm::detail::backend {
using namespace hip;

status copy_to_mapping(void* destination, const void* source, std::size_t size, int device) {
  PVMM_REQUIRE_RUNTIME();
  return on_device(device, [&]() -> status {
    PVMM_HIP(hipMemcpy, destination, source, size, hipMemcpyHostToDevice);
    if (hipError_t rc = hipDeviceSynchronize(); rc != hipSuccess) return failure(rc, "hipDeviceSynchronize");
    return {};
  });
}

status copy_from_mapping(void* destination, const void* source, std::size_t size, int device) {
  PVMM_REQUIRE_RUNTIME();
  return on_device(device, [&]() -> status {
    PVMM_HIP(hipMemcpy, destination, source, size, hipMemcpyDeviceToHost);
    return {};
  });
}

result<bool> write_faults(void*) {
  return make_error(errc::not_supported, "a faulting device write would abort the HIP runtime");
}

}  // namespace pvmm::detail::backend
