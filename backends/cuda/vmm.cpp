// Hot layout: backend::reserve, free_reservation, map, unmap, set_access and convert are listed by mangled name in
// cmake/hot_layout.ld; a rename or a new signature drops one out of the layout (the CTest tools/hot_layout says so).
//
// CUDA backend, feature "vmm": cuMemCreate, cuMemAddressReserve, cuMemMap, cuMemSetAccess and their inverses.
#include <vector>

#include "backend/vmm.hpp"
#include "driver.hpp"

namespace pvmm::detail::backend {
using namespace pvmm::cuda;

result<capabilities::vmm_features> vmm_capabilities(int ordinal) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY_ASSIGN(dev, device_of(ordinal));
  capabilities::vmm_features c;
  c.supported = attribute(dev, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) != 0;
  c.gpu_direct_rdma = attribute(dev, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED) != 0;
  c.compression = attribute(dev, CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED) != 0;
  c.host_numa_location = attribute(dev, CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) != 0;
  c.host_location = attribute(dev, CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) != 0;
  c.map_at_physical_offset = false;  // cuMemMap: "offset ... currently must be zero"
  c.map_part_of_allocation = false;  // cuMemMap of a prefix: CUDA_ERROR_NOT_SUPPORTED (H200, driver 580)
  // CPU access to device memory through a VMM mapping needs a coherent platform (ATS); pvmm claims it nowhere yet.
  c.host_access_to_device_memory = false;
  int numa = -1;
  if (api().cuDeviceGetAttribute(&numa, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, dev) != CUDA_SUCCESS) numa = -1;
  c.host_numa_id = numa;
  return c;
}

result<allocation_handle> create(const allocation_properties& properties, std::size_t size) {
  PVMM_REQUIRE_DRIVER();
  CUmemAllocationProp prop = to_cuda(properties);
  CUmemGenericAllocationHandle h = 0;
  if (CUresult rc = api().cuMemCreate(&h, size, &prop, 0); rc != CUDA_SUCCESS) {
    if (rc == CUDA_ERROR_NOT_PERMITTED && contains(properties.exportable, handle_types::fabric))
      return failure(rc, "cuMemCreate", imex_hint);
    return failure(rc, "cuMemCreate");
  }
  return allocation_handle{h};
}

status release(allocation_handle handle) { return PVMM_CU_STATUS(cuMemRelease, handle.value); }

result<allocation_properties> properties(allocation_handle handle) {
  PVMM_REQUIRE_DRIVER();
  CUmemAllocationProp prop{};
  PVMM_CU(cuMemGetAllocationPropertiesFromHandle, &prop, handle.value);
  allocation_properties p;
  p.location = from_cuda(prop.location);
  auto bits = static_cast<unsigned long long>(prop.requestedHandleTypes);
  handle_types t = handle_types::none;
  if (bits & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) t = t | handle_types::posix_fd;
  if (bits & CU_MEM_HANDLE_TYPE_FABRIC) t = t | handle_types::fabric;
  p.exportable = t;
  p.gpu_direct_rdma = prop.allocFlags.gpuDirectRDMACapable != 0;
  p.compression = prop.allocFlags.compressionType == CU_MEM_ALLOCATION_COMP_GENERIC;
  return p;
}

result<void*> reserve(std::size_t size, std::size_t alignment, const void* hint) {
  PVMM_REQUIRE_DRIVER();
  CUdeviceptr p = 0;
  PVMM_CU(cuMemAddressReserve, &p, size, alignment, ptr(hint), 0);
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p));
}

status free_reservation(void* address, std::size_t size) {
  return PVMM_CU_STATUS(cuMemAddressFree, ptr(address), size);
}

status map(void* address, std::size_t size, allocation_handle handle, std::size_t offset) {
  return PVMM_CU_STATUS(cuMemMap, ptr(address), size, offset, handle.value, 0);
}

status unmap(void* address, std::size_t size) { return PVMM_CU_STATUS(cuMemUnmap, ptr(address), size); }

namespace {
void convert(const access_descriptor* grants, std::size_t count, CUmemAccessDesc* out) {
  for (std::size_t i = 0; i < count; ++i) out[i] = {to_cuda(grants[i].location), to_cuda(grants[i].access)};
}
[[gnu::noinline, gnu::cold]] status set_access_many(void* address, std::size_t size, const access_descriptor* grants,
                                                    std::size_t count) {
  std::vector<CUmemAccessDesc> many(count);
  convert(grants, count, many.data());
  PVMM_CU(cuMemSetAccess, ptr(address), size, many.data(), count);
  return {};
}
}  // namespace

status set_access(void* address, std::size_t size, const access_descriptor* grants, std::size_t count) {
  PVMM_REQUIRE_DRIVER();
  if (count > 16) return set_access_many(address, size, grants, count);  // more grants than the list on the stack
  CUmemAccessDesc desc[16];
  convert(grants, count, desc);
  PVMM_CU(cuMemSetAccess, ptr(address), size, desc, count);
  return {};
}

result<access> get_access(location where, const void* address) {
  PVMM_REQUIRE_DRIVER();
  unsigned long long flags = 0;
  CUmemLocation l = to_cuda(where);
  PVMM_CU(cuMemGetAccess, &flags, &l, ptr(address));
  return access_of(flags);
}

}  // namespace pvmm::detail::backend
