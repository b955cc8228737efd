// CUDA backend, feature "pinned": cuMemHostAlloc / cuMemFreeHost, cuMemHostRegister / cuMemHostUnregister and
// cuMemHostGetDevicePointer, in device 0's primary context (portable memory is page-locked for every context).
#include "backend/pinned.hpp"
#include "driver.hpp"

namespace pvmm::detail::backend {
using namespace pvmm::cuda;

namespace {
unsigned flags_of(const pinned_options& o, bool allocation) {
  unsigned f = 0;
  if (o.portable) f |= allocation ? CU_MEMHOSTALLOC_PORTABLE : CU_MEMHOSTREGISTER_PORTABLE;
  if (o.mapped) f |= allocation ? CU_MEMHOSTALLOC_DEVICEMAP : CU_MEMHOSTREGISTER_DEVICEMAP;
  if (o.write_combined && allocation) f |= CU_MEMHOSTALLOC_WRITECOMBINED;
  return f;
}
constexpr const char* memlock_hint = "page-locking host memory failed: the system may be short of lockable memory";
}  // namespace

result<capabilities::host_memory_features> host_memory_capabilities(int ordinal) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY_ASSIGN(dev, device_of(ordinal));
  capabilities::host_memory_features f;
  f.pinned = api().cuMemHostAlloc && api().cuMemFreeHost;
  f.registration = api().cuMemHostRegister && api().cuMemHostUnregister &&
                   attribute(dev, CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED) != 0;
  f.mapped = attribute(dev, CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY) != 0;
  f.device_pointer_is_host_pointer = attribute(dev, CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM) != 0;
  return f;
}

result<void*> allocate_pinned(std::size_t size, const pinned_options& options) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY_ASSIGN(scope, context_scope::primary(0));
  void* p = nullptr;
  if (CUresult rc = api().cuMemHostAlloc(&p, size, flags_of(options, true)); rc != CUDA_SUCCESS)
    return failure(rc, "cuMemHostAlloc", rc == CUDA_ERROR_OUT_OF_MEMORY ? memlock_hint : "");
  return p;
}

status free_pinned(void* pointer, std::size_t) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY_ASSIGN(scope, context_scope::primary(0));
  PVMM_CU(cuMemFreeHost, pointer);
  return {};
}

status register_host(void* pointer, std::size_t size, const pinned_options& options) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY_ASSIGN(scope, context_scope::primary(0));
  if (CUresult rc = api().cuMemHostRegister(pointer, size, flags_of(options, false)); rc != CUDA_SUCCESS)
    return failure(rc, "cuMemHostRegister", rc == CUDA_ERROR_OUT_OF_MEMORY ? memlock_hint : "",
                   rc == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED ? errc::already_registered : errc{});
  return {};
}

status unregister_host(void* pointer, std::size_t) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY_ASSIGN(scope, context_scope::primary(0));
  if (CUresult rc = api().cuMemHostUnregister(pointer); rc != CUDA_SUCCESS)
    return failure(rc, "cuMemHostUnregister", "",
                   rc == CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED ? errc::not_registered : errc{});
  return {};
}

result<void*> host_device_pointer(void* pointer, int device) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY_ASSIGN(scope, context_scope::primary(device));
  CUdeviceptr d = 0;
  PVMM_CU(cuMemHostGetDevicePointer, &d, pointer, 0);
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(d));
}

}  // namespace pvmm::detail::backend
