// HIP backend, feature "pinned": hipHostMalloc / hipHostFree, hipHostRegister / hipHostUnregister and
// hipHostGetDevicePointer (whose pointer may differ from the host's: capabilities say when).
#include "backend/pinned.hpp"
#include "runtime.hpp"

namespace pvmm::detail::backend {
using namespace hip;

result<capabilities::host_memory_features> host_memory_capabilities(int ordinal) {
  PVMM_REQUIRE_RUNTIME();
  capabilities::host_memory_features f;
  f.pinned = true;
  f.registration = true;
  f.mapped = device_attribute(hipDeviceAttributeCanMapHostMemory, ordinal) != 0;
  f.device_pointer_is_host_pointer =
      device_attribute(hipDeviceAttributeCanUseHostPointerForRegisteredMem, ordinal) != 0;
  return f;
}

result<void*> allocate_pinned(std::size_t size, const pinned_options& o) {
  PVMM_REQUIRE_RUNTIME();
  unsigned flags = 0;
  if (o.portable) flags |= hipHostMallocPortable;
  if (o.mapped) flags |= hipHostMallocMapped;
  if (o.write_combined) flags |= hipHostMallocWriteCombined;
  void* p = nullptr;
  PVMM_HIP(hipHostMalloc, &p, size, flags);
  return p;
}

status free_pinned(void* pointer, std::size_t) { return PVMM_HIP_STATUS(hipHostFree, pointer); }

status register_host(void* pointer, std::size_t size, const pinned_options& o) {
  PVMM_REQUIRE_RUNTIME();
  unsigned flags = 0;
  if (o.portable) flags |= hipHostRegisterPortable;
  if (o.mapped) flags |= hipHostRegisterMapped;
  if (hipError_t rc = hipHostRegister(pointer, size, flags); rc != hipSuccess)
    return failure(rc, "hipHostRegister", "",
                   rc == hipErrorHostMemoryAlreadyRegistered ? errc::already_registered : errc{});
  return {};
}

status unregister_host(void* pointer, std::size_t) {
  PVMM_REQUIRE_RUNTIME();
  if (hipError_t rc = hipHostUnregister(pointer); rc != hipSuccess)
    return failure(rc, "hipHostUnregister", "", rc == hipErrorHostMemoryNotRegistered ? errc::not_registered : errc{});
  return {};
}

result<void*> host_device_pointer(void* pointer, int device) {
  PVMM_REQUIRE_RUNTIME();
  return on_device(device, [&]() -> result<void*> {
    void* d = nullptr;
    PVMM_HIP(hipHostGetDevicePointer, &d, pointer, 0);
    return d;
  });
}

}  // namespace pvmm::detail::backend
