// Hot layout: backend::reserve, free_reservation, map, unmap and set_access are listed by mangled name in
// cmake/hot_layout.ld; a rename or a new signature drops one out of the layout (the CTest tools/hot_layout says so).
//
// HIP backend, feature "vmm": hipMemCreate (on the current device, set for the call), hipMemAddressReserve,
// hipMemMap, hipMemSetAccess (one call per mapping) and their inverses.
#include <vector>

#include "backend/vmm.hpp"
#include "runtime.hpp"

namespace pvmm::detail::backend {
using namespace hip;

result<capabilities::vmm_features> vmm_capabilities(int ordinal) {
  PVMM_REQUIRE_RUNTIME();
  capabilities::vmm_features c;
#if PVMM_HIP_HAS_VMM_ATTRIBUTE
  int vmm = 0;
  PVMM_HIP(hipDeviceGetAttribute, &vmm, hipDeviceAttributeVirtualMemoryManagementSupported, ordinal);
  c.supported = vmm != 0;
#else
  (void)ordinal;
  c.supported = true;               // the runtime is 6.1+ (checked at start) but these headers lack the attribute
#endif
  c.map_at_physical_offset = false;
#if defined(__HIP_PLATFORM_NVIDIA__)
  c.map_part_of_allocation = false;  // hipMemMap is cuMemMap there, which refuses a prefix (NOT_SUPPORTED)
#else
  c.map_part_of_allocation = true;  // ROCm's own tests map a prefix of a larger allocation
#endif
  c.host_access_to_device_memory = false;  // hipMemSetAccess grants devices; host memory is not created here
  return c;
}

result<allocation_handle> create(const allocation_properties& p, std::size_t size) {
  PVMM_REQUIRE_RUNTIME();
  if (p.location.type != location::kind::device) return only_device_memory();
  if (contains(p.exportable, handle_types::posix_fd | handle_types::fabric))
    return make_error(errc::not_supported,
                      "HIP's hipMemAllocationProp holds one handle type: request posix_fd or fabric, not both");
  return on_device(p.location.id, [&]() -> result<allocation_handle> {
    hipMemAllocationProp prop = to_hip(p);
    native_handle h{};
    PVMM_HIP(hipMemCreate, &h, size, &prop, 0);
    return from_hip(h);
  });
}

status release(allocation_handle handle) { return PVMM_HIP_STATUS(hipMemRelease, to_hip(handle)); }

result<allocation_properties> properties(allocation_handle handle) {
  PVMM_REQUIRE_RUNTIME();
  hipMemAllocationProp prop{};
  PVMM_HIP(hipMemGetAllocationPropertiesFromHandle, &prop, to_hip(handle));
  allocation_properties p;
  p.location = location::device(prop.location.id);
#if PVMM_HIP_HAS_REQUESTED_HANDLE_TYPES
  auto bits = static_cast<unsigned>(prop.requestedHandleTypes);
#else
  auto bits = static_cast<unsigned>(prop.requestedHandleType);
#endif
  p.exportable = (bits & hipMemHandleTypePosixFileDescriptor) ? handle_types::posix_fd : handle_types::none;
#if PVMM_HIP_HAS_FABRIC
  if (bits == static_cast<unsigned>(hipMemHandleTypeFabric)) p.exportable = handle_types::fabric;
#endif
  return p;
}

result<void*> reserve(std::size_t size, std::size_t alignment, const void* hint) {
  PVMM_REQUIRE_RUNTIME();
  native_address a{};
  PVMM_HIP(hipMemAddressReserve, &a, size, alignment, to_hip(hint), 0);
  void* p = from_hip_address(a);
  if (!p)
    return make_error(errc::backend_error, "hipMemAddressReserve succeeded with a null address",
                      "this runtime's VMM is a stub: use ROCm 6.1 or later");
  return p;
}

status free_reservation(void* address, std::size_t size) {
  return PVMM_HIP_STATUS(hipMemAddressFree, to_hip(address), size);
}

status map(void* address, std::size_t size, allocation_handle handle, std::size_t offset) {
  return PVMM_HIP_STATUS(hipMemMap, to_hip(address), size, offset, to_hip(handle), 0);
}

status unmap(void* address, std::size_t size) { return PVMM_HIP_STATUS(hipMemUnmap, to_hip(address), size); }

status set_access(void* address, std::size_t size, const access_descriptor* grants, std::size_t count) {
  PVMM_REQUIRE_RUNTIME();
  std::vector<hipMemAccessDesc> desc;
  desc.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    if (grants[i].location.type != location::kind::device) {
      // The neutral layer let it through, so it asks for nothing (access none to the host): nothing to pass on.
      if (grants[i].access == access::none) continue;
      return make_error(errc::not_supported, "the hip backend grants access to devices only");
    }
    desc.push_back({device_location(grants[i].location.id), to_hip(grants[i].access)});
  }
  if (desc.empty()) return {};
  PVMM_HIP(hipMemSetAccess, to_hip(address), size, desc.data(), desc.size());
  return {};
}

result<access> get_access(location where, const void* address) {
  PVMM_REQUIRE_RUNTIME();
  if (where.type != location::kind::device)
    return make_error(errc::not_supported, "the hip backend tracks device access only");
  hipMemLocation l = device_location(where.id);
  unsigned long long flags = 0;
  PVMM_HIP(hipMemGetAccess, &flags, &l, to_hip(address));
  return access_of(flags);
}

}  // namespace pvmm::detail::backend
