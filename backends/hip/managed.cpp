// HIP backend, feature "managed": hipMallocManaged, hipMemAdvise and hipMemPrefetchAsync (device ordinals:
// hipCpuDeviceId names the host; NUMA nodes cannot be named), hipMemRangeGetAttribute, hipStreamAttachMemAsync.
// On AMD "concurrent managed access" is SVM support, not page migration: pages move only with XNACK
// (PageableMemoryAccess), so pages_migrate is ManagedMemory && PageableMemoryAccess there (as Kokkos decides).
// hipStreamAttachMemAsync does nothing on AMD; pvmm still validates the call.
#include <iterator>

#include "backend/managed.hpp"
#include "core/propagate.hpp"
#include "runtime.hpp"

namespace pvmm::detail::backend {
using namespace hip;

namespace {

// The runtime's advice, indexed by pvmm's (in its order).
constexpr hipMemoryAdvise advices[] = {hipMemAdviseSetReadMostly,        hipMemAdviseUnsetReadMostly,
                                       hipMemAdviseSetPreferredLocation, hipMemAdviseUnsetPreferredLocation,
                                       hipMemAdviseSetAccessedBy,        hipMemAdviseUnsetAccessedBy};
hipMemoryAdvise advice_of(advice a) { return native_advice(advices, a); }
template <class T>
result<T> range_attribute(const void* p, std::size_t size, hipMemRangeAttribute which) {
  T value{};
  PVMM_HIP(hipMemRangeGetAttribute, &value, sizeof value, which, p, size);
  return value;
}
// hipStreamAttachMemAsync takes void* on AMD and hipDeviceptr_t* on NVIDIA: the type is read off its signature.
template <class>
struct second_parameter;
template <class R, class A, class B, class... Rest>
struct second_parameter<R (*)(A, B, Rest...)> {
  using type = B;
};
using attach_pointer = typename second_parameter<decltype(&hipStreamAttachMemAsync)>::type;

}  // namespace

result<capabilities::managed_features> managed_capabilities(int ordinal) {
  PVMM_REQUIRE_RUNTIME();
  capabilities::managed_features f;
  f.supported = device_attribute(hipDeviceAttributeManagedMemory, ordinal) != 0;
  f.concurrent_access = f.supported && device_attribute(hipDeviceAttributeConcurrentManagedAccess, ordinal) != 0;
  f.pageable_memory_access = device_attribute(hipDeviceAttributePageableMemoryAccess, ordinal) != 0;
#if defined(__HIP_PLATFORM_AMD__)
  f.pages_migrate = f.supported && f.pageable_memory_access;  // XNACK (HSA_XNACK=1 on an HMM kernel)
#else
  f.pages_migrate = f.concurrent_access;  // CUDA's meaning
#endif
  f.host_numa_locations = false;  // HIP's advice and prefetch take device ordinals
  f.location_attributes = false;
  return f;
}

result<void*> allocate_managed(std::size_t size, attach_mode mode) {
  PVMM_REQUIRE_RUNTIME();
  void* p = nullptr;
  PVMM_HIP(hipMallocManaged, &p, size, mode == attach_mode::host ? hipMemAttachHost : hipMemAttachGlobal);
  return p;
}

status free_managed(void* pointer) { return PVMM_HIP_STATUS(hipFree, pointer); }

status advise_managed(const void* pointer, std::size_t size, advice what, location where) {
  return PVMM_HIP_STATUS(hipMemAdvise, pointer, size, advice_of(what), legacy_ordinal(where, hipCpuDeviceId));
}

status prefetch_managed(const void* pointer, std::size_t size, location to, stream_handle s, int) {
  return PVMM_HIP_STATUS(hipMemPrefetchAsync, pointer, size, legacy_ordinal(to, hipCpuDeviceId), native(s));
}

result<range_attributes> query_managed_range(const void* pointer, std::size_t size) {
  PVMM_REQUIRE_RUNTIME();
  range_attributes a;
  PVMM_TRY_ASSIGN(read_mostly, range_attribute<int>(pointer, size, hipMemRangeAttributeReadMostly));
  PVMM_TRY_ASSIGN(preferred, range_attribute<int>(pointer, size, hipMemRangeAttributePreferredLocation));
  PVMM_TRY_ASSIGN(last, range_attribute<int>(pointer, size, hipMemRangeAttributeLastPrefetchLocation));
  a.read_mostly = read_mostly != 0;
  a.preferred_location = from_legacy_ordinal(preferred, hipCpuDeviceId);
  a.last_prefetch_location = from_legacy_ordinal(last, hipCpuDeviceId);
  int devices = 0;
  PVMM_HIP(hipGetDeviceCount, &devices);
  std::vector<int> slots(static_cast<std::size_t>(devices) + 1, hipInvalidDeviceId);
  PVMM_HIP(hipMemRangeGetAttribute, slots.data(), slots.size() * sizeof(int), hipMemRangeAttributeAccessedBy, pointer,
           size);
  for (int v : slots)
    if (auto l = from_legacy_ordinal(v, hipCpuDeviceId)) a.accessed_by.push_back(*l);
  return a;
}

status attach_managed(stream_handle s, int, const void* pointer, std::size_t, attach_mode mode) {
  PVMM_REQUIRE_RUNTIME();
  const unsigned flags = mode == attach_mode::single ? hipMemAttachSingle
                         : mode == attach_mode::host ? hipMemAttachHost
                                                     : hipMemAttachGlobal;
  PVMM_HIP(hipStreamAttachMemAsync, native(s), reinterpret_cast<attach_pointer>(const_cast<void*>(pointer)), 0, flags);
  return {};
}

}  // namespace pvmm::detail::backend
