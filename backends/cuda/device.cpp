// CUDA backend, feature "device": the driver, its devices, their memory and granularities.
#include "backend/device.hpp"
#include "driver.hpp"

namespace pvmm::detail::backend {
using namespace pvmm::cuda;

const backend_traits traits{"cuda", /*set_access_spans_mappings=*/true, /*copy_stages_pageable=*/false,
                            "managed memory needs a GPU and driver that have it; prefetching to a GPU needs concurrent "
                            "managed access (Linux, compute capability 6.0 or newer): "
                            "capabilities.managed.supported / concurrent_access"};

backend_info info() {
  auto& s = driver();
  backend_info b;
  b.name = traits.name;
  b.runtime_version = fmt::format("CUDA headers {}.{}", CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);
  if (s.version) b.driver_version = fmt::format("CUDA driver API {}.{}", s.version / 1000, s.version % 1000 / 10);
  b.available = s.available;
  b.unavailable_reason = s.reason;
  // A driver that initialised but lacks what pvmm needs still counts its devices: they are refused, not absent.
  int n = 0;
  if (!s.available && s.api && s.api->cuDeviceGetCount && s.api->cuDeviceGetCount(&n) == CUDA_SUCCESS)
    b.refused_devices = n;
  return b;
}

result<int> device_count() {
  if (!driver().available) return 0;
  int n = 0;
  PVMM_CU(cuDeviceGetCount, &n);
  return n;
}

result<device_info> device(int ordinal) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY_ASSIGN(dev, device_of(ordinal));
  device_info d;
  d.ordinal = ordinal;
  char name[256] = {};
  PVMM_CU(cuDeviceGetName, name, static_cast<int>(sizeof name), dev);
  d.name = name;
  char bus[64] = {};
  if (api().cuDeviceGetPCIBusId && api().cuDeviceGetPCIBusId(bus, static_cast<int>(sizeof bus), dev) == CUDA_SUCCESS)
    d.identifier = bus;
  std::size_t total = 0;
  if (api().cuDeviceTotalMem && api().cuDeviceTotalMem(&total, dev) == CUDA_SUCCESS) d.total_memory = total;
  return d;
}

result<memory_info> memory(int ordinal) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY_ASSIGN(scope, context_scope::primary(ordinal));
  std::size_t free = 0, total = 0;
  PVMM_CU(cuMemGetInfo, &free, &total);
  return memory_info{free, total, false};
}

result<bool> can_access_peer(int device, int peer) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY_ASSIGN(d, device_of(device));
  PVMM_TRY_ASSIGN(p, device_of(peer));
  int can = 0;
  PVMM_CU(cuDeviceCanAccessPeer, &can, d, p);
  return can != 0;
}

result<granularity> allocation_granularity(const allocation_properties& properties) {
  PVMM_REQUIRE_DRIVER();
  CUmemAllocationProp prop = to_cuda(properties);
  granularity g;
  PVMM_CU(cuMemGetAllocationGranularity, &g.minimum, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  PVMM_CU(cuMemGetAllocationGranularity, &g.recommended, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
  return g;
}

}  // namespace pvmm::detail::backend
