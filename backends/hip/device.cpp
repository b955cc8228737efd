// HIP backend, feature "device": the runtime (refused before ROCm 6.1), its devices, memory, granularity.
#include "backend/device.hpp"
#include "runtime.hpp"

namespace pvmm::detail::backend {
using namespace hip;

// HIP sets access per mapping: hipMemSetAccess must cover exactly one mapping.
const backend_traits traits {
  "hip", /*set_access_spans_mappings=*/false, /*copy_stages_pageable=*/false,
#if defined(__HIP_PLATFORM_AMD__)
      "on AMD GPUs managed pages migrate on demand only with XNACK: run with HSA_XNACK=1 on a GPU "
      "and kernel (HMM) that support it; capabilities.managed.pages_migrate says whether they do"
#else
      "on HIP's NVIDIA platform, as on CUDA: prefetching to a GPU needs concurrent managed "
      "access: capabilities.managed.supported / concurrent_access"
#endif
};

backend_info info() {
  const auto& r = runtime();
  backend_info b;
  b.name = traits.name;
  b.runtime_version =
      fmt::format("{} runtime on {} (HIP headers {}.{})", r.version ? version_text(r.version) : "unknown", platform,
                  HIP_VERSION_MAJOR, HIP_VERSION_MINOR);
  int driver = 0;
  if (hipDriverGetVersion(&driver) != hipSuccess)
    forget_last_error();  // no driver: an answer here, not the caller's error
  else if (driver)
    b.driver_version = version_text(driver);
  b.available = r.available;
  b.unavailable_reason = r.reason;
  b.unavailable_code = r.code;
  b.refused_devices = r.refused_devices;
  return b;
}

result<int> device_count() {
  if (!runtime().available) return 0;
  int n = 0;
  PVMM_HIP(hipGetDeviceCount, &n);
  return n;
}

result<device_info> device(int ordinal) {
  PVMM_REQUIRE_RUNTIME();
  hipDeviceProp_t props{};
  PVMM_HIP(hipGetDeviceProperties, &props, ordinal);
  device_info d;
  d.ordinal = ordinal;
  d.name = props.name;
  d.identifier = fmt::format("{:04x}:{:02x}:{:02x}.0", props.pciDomainID, props.pciBusID, props.pciDeviceID);
  d.total_memory = props.totalGlobalMem;
  return d;
}

result<memory_info> memory(int ordinal) {
  PVMM_REQUIRE_RUNTIME();
  return on_device(ordinal, [&]() -> result<memory_info> {
    std::size_t free = 0, total = 0;
    PVMM_HIP(hipMemGetInfo, &free, &total);
    return memory_info{free, total, false};
  });
}

result<bool> can_access_peer(int device, int peer) {
  PVMM_REQUIRE_RUNTIME();
  int can = 0;
  PVMM_HIP(hipDeviceCanAccessPeer, &can, device, peer);
  return can != 0;
}

result<granularity> allocation_granularity(const allocation_properties& p) {
  PVMM_REQUIRE_RUNTIME();
  if (p.location.type != location::kind::device) return only_device_memory();
  hipMemAllocationProp prop = to_hip(p);
  granularity g;
  PVMM_HIP(hipMemGetAllocationGranularity, &g.minimum, &prop, hipMemAllocationGranularityMinimum);
  PVMM_HIP(hipMemGetAllocationGranularity, &g.recommended, &prop, hipMemAllocationGranularityRecommended);
  return g;
}

}  // namespace pvmm::detail::backend
