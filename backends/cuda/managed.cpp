// CUDA backend, feature "managed": cuMemAllocManaged, cuMemAdvise and cuMemPrefetchAsync in the ABI the driver has
// (the location ABI of 12.2 where present, else the device-ordinal one of 8.0, which names the host as CU_DEVICE_CPU
// and cannot name NUMA nodes), cuMemRangeGetAttribute (the location-typed attributes where the driver is 13.0 or
// newer: older drivers do not know them, whatever the headers say), cuStreamAttachMemAsync.
#include <iterator>

#include "backend/managed.hpp"
#include "driver.hpp"

namespace pvmm::detail::backend {
using namespace pvmm::cuda;

namespace {
bool location_abi() { return api().cuMemAdvise != nullptr && api().cuMemPrefetchAsync != nullptr; }
bool location_attributes() { return driver().version >= 13000; }

// The driver's advice, indexed by pvmm's (in its order).
constexpr CUmem_advise advices[] = {CU_MEM_ADVISE_SET_READ_MOSTLY,        CU_MEM_ADVISE_UNSET_READ_MOSTLY,
                                    CU_MEM_ADVISE_SET_PREFERRED_LOCATION, CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION,
                                    CU_MEM_ADVISE_SET_ACCESSED_BY,        CU_MEM_ADVISE_UNSET_ACCESSED_BY};
CUmem_advise advice_of(advice a) { return native_advice(advices, a); }
std::optional<location> from_typed(int type, int id) {
  switch (type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
      return location::device(id);
    case CU_MEM_LOCATION_TYPE_HOST:
      return location::host();
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
      return location::host_numa(id);
    default:
      return std::nullopt;
  }
}

template <class T>
result<T> range_attribute(const void* p, std::size_t size, CUmem_range_attribute which) {
  T value{};
  PVMM_CU(cuMemRangeGetAttribute, &value, sizeof value, which, ptr(p), size);
  return value;
}
}  // namespace

result<capabilities::managed_features> managed_capabilities(int ordinal) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY_ASSIGN(dev, device_of(ordinal));
  capabilities::managed_features f;
  f.supported = attribute(dev, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY) != 0 && api().cuMemAllocManaged &&
                (location_abi() || api().cuMemAdvise_device);
  f.concurrent_access = f.supported && attribute(dev, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS) != 0;
  f.pages_migrate = f.concurrent_access;  // CUDA migrates on fault wherever access is concurrent
  f.pageable_memory_access = attribute(dev, CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS) != 0;
  f.host_numa_locations = f.supported && location_abi();
  f.location_attributes = f.host_numa_locations && location_attributes();
  return f;
}

result<void*> allocate_managed(std::size_t size, attach_mode mode) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY_ASSIGN(scope, context_scope::primary(0));
  CUdeviceptr p = 0;
  PVMM_CU(cuMemAllocManaged, &p, size, mode == attach_mode::host ? CU_MEM_ATTACH_HOST : CU_MEM_ATTACH_GLOBAL);
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p));
}

status free_managed(void* pointer) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY_ASSIGN(scope, context_scope::primary(0));
  PVMM_CU(cuMemFree, ptr(pointer));
  return {};
}

status advise_managed(const void* pointer, std::size_t size, advice what, location where) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY_ASSIGN(scope, context_scope::primary(0));
  if (location_abi()) {
    PVMM_CU(cuMemAdvise, ptr(pointer), size, advice_of(what), to_cuda(where));
  } else {
    PVMM_CU(cuMemAdvise_device, ptr(pointer), size, advice_of(what), legacy_ordinal(where, CU_DEVICE_CPU));
  }
  return {};
}

status prefetch_managed(const void* pointer, std::size_t size, location to, stream_handle s, int) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY_ASSIGN(scope, context_scope::of_stream(native(s)));
  if (location_abi()) {
    PVMM_CU(cuMemPrefetchAsync, ptr(pointer), size, to_cuda(to), 0, native(s));
  } else {
    PVMM_CU(cuMemPrefetchAsync_device, ptr(pointer), size, legacy_ordinal(to, CU_DEVICE_CPU), native(s));
  }
  return {};
}

result<range_attributes> query_managed_range(const void* pointer, std::size_t size) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY_ASSIGN(scope, context_scope::primary(0));
  range_attributes a;
  PVMM_TRY_ASSIGN(read_mostly, range_attribute<int>(pointer, size, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY));
  a.read_mostly = read_mostly != 0;
  if (location_attributes()) {
    PVMM_TRY_ASSIGN(pt, range_attribute<int>(pointer, size, CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE));
    PVMM_TRY_ASSIGN(pi, range_attribute<int>(pointer, size, CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID));
    PVMM_TRY_ASSIGN(lt, range_attribute<int>(pointer, size, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE));
    PVMM_TRY_ASSIGN(li, range_attribute<int>(pointer, size, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID));
    a.preferred_location = from_typed(pt, pi);
    a.last_prefetch_location = from_typed(lt, li);
  } else {
    PVMM_TRY_ASSIGN(preferred, range_attribute<int>(pointer, size, CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION));
    PVMM_TRY_ASSIGN(last, range_attribute<int>(pointer, size, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION));
    a.preferred_location = from_legacy_ordinal(preferred, CU_DEVICE_CPU);
    a.last_prefetch_location = from_legacy_ordinal(last, CU_DEVICE_CPU);
  }
  // Accessed-by: one int per slot, padded with CU_DEVICE_INVALID; room for every device and the host.
  int devices = 0;
  PVMM_CU(cuDeviceGetCount, &devices);
  std::vector<int> slots(static_cast<std::size_t>(devices) + 1, CU_DEVICE_INVALID);
  PVMM_CU(cuMemRangeGetAttribute, slots.data(), slots.size() * sizeof(int), CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY,
          ptr(pointer), size);
  for (int v : slots)
    if (auto l = from_legacy_ordinal(v, CU_DEVICE_CPU)) a.accessed_by.push_back(*l);
  return a;
}

status attach_managed(stream_handle s, int, const void* pointer, std::size_t, attach_mode mode) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY_ASSIGN(scope, context_scope::of_stream(native(s)));
  const unsigned flags = mode == attach_mode::single ? CU_MEM_ATTACH_SINGLE
                         : mode == attach_mode::host ? CU_MEM_ATTACH_HOST
                                                     : CU_MEM_ATTACH_GLOBAL;
  PVMM_CU(cuStreamAttachMemAsync, native(s), ptr(pointer), 0, flags);  // 0: the whole allocation
  return {};
}

}  // namespace pvmm::detail::backend
