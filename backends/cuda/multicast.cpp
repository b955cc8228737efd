// CUDA backend, feature "multicast": cuMulticast* (CUDA 12.1+; older drivers report no multicast), mapped,
// released and shared with the same calls as memory.
#include "backend/multicast.hpp"
#include "driver.hpp"

namespace pvmm::detail::backend {
using namespace pvmm::cuda;

namespace {
error no_multicast() {
  return make_error(errc::not_supported, "this CUDA driver has no multicast entry points (needs CUDA 12.1+)");
}
}  // namespace

result<bool> multicast_capability(int ordinal) {
  PVMM_TRY_ASSIGN(reported, has_attribute(ordinal, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED));
  return reported && api().cuMulticastCreate != nullptr;  // drivers before 12.1 have no entry points
}

result<granularity> multicast_granularity(const multicast_request& request) {
  PVMM_REQUIRE_DRIVER();
  if (!api().cuMulticastGetGranularity) return no_multicast();
  CUmulticastObjectProp prop = to_cuda(request);
  granularity g;
  PVMM_CU(cuMulticastGetGranularity, &g.minimum, &prop, CU_MULTICAST_GRANULARITY_MINIMUM);
  PVMM_CU(cuMulticastGetGranularity, &g.recommended, &prop, CU_MULTICAST_GRANULARITY_RECOMMENDED);
  return g;
}

result<multicast_handle> multicast_create(const multicast_request& request) {
  PVMM_REQUIRE_DRIVER();
  if (!api().cuMulticastCreate) return no_multicast();
  CUmulticastObjectProp prop = to_cuda(request);
  CUmemGenericAllocationHandle h = 0;
  PVMM_CU(cuMulticastCreate, &h, &prop);
  return multicast_handle{h};
}

status multicast_release(multicast_handle object) { return PVMM_CU_STATUS(cuMemRelease, object.value); }

status multicast_add_device(multicast_handle object, int ordinal) {
  PVMM_REQUIRE_DRIVER();
  if (!api().cuMulticastAddDevice) return no_multicast();
  PVMM_TRY_ASSIGN(dev, device_of(ordinal));
  PVMM_CU(cuMulticastAddDevice, object.value, dev);
  return {};
}

status multicast_bind(multicast_handle object, std::size_t offset, allocation_handle memory, std::size_t memory_offset,
                      std::size_t size) {
  PVMM_REQUIRE_DRIVER();
  if (!api().cuMulticastBindMem) return no_multicast();
  PVMM_CU(cuMulticastBindMem, object.value, offset, memory.value, memory_offset, size, 0);
  return {};
}

status multicast_unbind(multicast_handle object, int ordinal, std::size_t offset, std::size_t size) {
  PVMM_REQUIRE_DRIVER();
  if (!api().cuMulticastUnbind) return no_multicast();
  PVMM_TRY_ASSIGN(dev, device_of(ordinal));
  PVMM_CU(cuMulticastUnbind, object.value, dev, offset, size);
  return {};
}

status multicast_map(void* address, std::size_t size, multicast_handle object, std::size_t offset) {
  return PVMM_CU_STATUS(cuMemMap, ptr(address), size, offset, object.value, 0);
}

result<int> multicast_export_posix_fd(multicast_handle object) { return export_fd(object.value); }

result<multicast_handle> multicast_import_posix_fd(int fd, std::size_t) {
  PVMM_TRY_ASSIGN(h, import_fd(fd, "pass an fd exported from a multicast object"));
  return multicast_handle{h};
}

result<fabric_handle> multicast_export_fabric(multicast_handle object) { return export_fabric_handle(object.value); }

result<multicast_handle> multicast_import_fabric(const fabric_handle& handle, std::size_t) {
  PVMM_TRY_ASSIGN(h, import_fabric_handle(handle));
  return multicast_handle{h};
}

}  // namespace pvmm::detail::backend
