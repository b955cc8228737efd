// The fake CUDA driver's entries: one generic entry for the whole table (count, zero the outputs, succeed) and
// the few that must answer something plausible for pvmm to go on (devices, contexts, addresses, handles).
#include "fake_driver.hpp"

#include <cstdio>
#include <type_traits>

namespace pvmm::cuda::fake {

std::array<std::uint64_t, entry_count> calls{};

namespace {

const char* const entry_names[] = {
#define PVMM_FAKE_NAME(name, version, need) #name,
#define PVMM_FAKE_NAME_AS(field, name, prototype, version, need) #field,
    PVMM_CUDA_ENTRY_POINTS(PVMM_FAKE_NAME, PVMM_FAKE_NAME_AS)
#undef PVMM_FAKE_NAME
#undef PVMM_FAKE_NAME_AS
};

// The fake's state, global for the same reason as `calls`: set by table(), read by its entries.
int device_count = 1;
std::uintptr_t next_address = std::uintptr_t{1} << 40;
CUmemGenericAllocationHandle next_handle = 1;
constexpr std::size_t two_mib = std::size_t{2} << 20;

std::uintptr_t bump(std::size_t size) {
  const std::uintptr_t p = next_address;
  next_address += (size + two_mib - 1) & ~(two_mib - 1);
  return p;
}
template <class T>
T* handle(std::uintptr_t v) {
  return reinterpret_cast<T*>(v);
}
const CUcontext primary = handle<CUctx_st>(0x100);

template <class T>
void zero_output(T* p) {
  // Scalars, enums and pointers only: a pointer to an opaque handle struct is an input.
  if constexpr (!std::is_const_v<T> && (std::is_arithmetic_v<T> || std::is_enum_v<T> || std::is_pointer_v<T>))
    if (p) *p = T{};
}
template <class T>
void zero_output(T) {}

/// The generic entry: counts the call, zeroes every output argument, succeeds.
template <int Id, class F>
struct null_entry;
template <int Id, class... A>
struct null_entry<Id, CUresult (*)(A...)> {
  static CUresult call(A... a) {
    ++calls[Id];
    (zero_output(a), ...);
    return CUDA_SUCCESS;
  }
};

}  // namespace

const char* name_of(int id) noexcept { return id >= 0 && id < entry_count ? entry_names[id] : "(no such entry)"; }

driver_api table(int devices) {
  device_count = devices;
  driver_api t;
#define PVMM_FAKE_SET(name, version, need) t.name = &null_entry<id_##name, decltype(&::name)>::call;
#define PVMM_FAKE_SET_AS(field, name, prototype, version, need) t.field = &null_entry<id_##field, prototype>::call;
  PVMM_CUDA_ENTRY_POINTS(PVMM_FAKE_SET, PVMM_FAKE_SET_AS)
#undef PVMM_FAKE_SET
#undef PVMM_FAKE_SET_AS
  t.cuDriverGetVersion = [](int* v) { return ++calls[id_cuDriverGetVersion], *v = 13000, CUDA_SUCCESS; };
  t.cuGetErrorName = [](CUresult, const char** s) { return *s = "CUDA_ERROR_FAKE", CUDA_SUCCESS; };
  t.cuGetErrorString = [](CUresult, const char** s) { return *s = "fake driver", CUDA_SUCCESS; };
  t.cuDeviceGet = [](CUdevice* d, int ordinal) { return ++calls[id_cuDeviceGet], *d = ordinal, CUDA_SUCCESS; };
  t.cuDeviceGetCount = [](int* n) { return ++calls[id_cuDeviceGetCount], *n = device_count, CUDA_SUCCESS; };
  t.cuDeviceGetName = [](char* name, int length, CUdevice d) {
    std::snprintf(name, static_cast<std::size_t>(length), "fake CUDA device %d", d);
    return ++calls[id_cuDeviceGetName], CUDA_SUCCESS;
  };
  t.cuDeviceGetAttribute = [](int* v, CUdevice_attribute, CUdevice) {
    return ++calls[id_cuDeviceGetAttribute], *v = 1, CUDA_SUCCESS;
  };
  t.cuDeviceTotalMem = [](std::size_t* b, CUdevice) {
    return ++calls[id_cuDeviceTotalMem], *b = std::size_t{80} << 30, CUDA_SUCCESS;
  };
  t.cuMemGetInfo = [](std::size_t* f, std::size_t* b) {
    return ++calls[id_cuMemGetInfo], *f = *b = std::size_t{80} << 30, CUDA_SUCCESS;
  };
  t.cuMemGetAllocationGranularity = [](std::size_t* g, const CUmemAllocationProp*, CUmemAllocationGranularity_flags) {
    return ++calls[id_cuMemGetAllocationGranularity], *g = two_mib, CUDA_SUCCESS;
  };
  t.cuDevicePrimaryCtxRetain = [](CUcontext* c, CUdevice) {
    return ++calls[id_cuDevicePrimaryCtxRetain], *c = primary, CUDA_SUCCESS;
  };
  t.cuCtxGetCurrent = [](CUcontext* c) { return ++calls[id_cuCtxGetCurrent], *c = primary, CUDA_SUCCESS; };
  t.cuCtxPopCurrent = [](CUcontext* c) { return ++calls[id_cuCtxPopCurrent], *c = primary, CUDA_SUCCESS; };
  t.cuStreamCreate = [](CUstream* s, unsigned) {
    return ++calls[id_cuStreamCreate], *s = handle<CUstream_st>(0x200), CUDA_SUCCESS;
  };
  t.cuStreamGetCtx = [](CUstream, CUcontext* c) { return ++calls[id_cuStreamGetCtx], *c = primary, CUDA_SUCCESS; };
  t.cuMemPoolCreate = [](CUmemoryPool* p, const CUmemPoolProps*) {
    return ++calls[id_cuMemPoolCreate], *p = handle<CUmemPoolHandle_st>(0x300), CUDA_SUCCESS;
  };
  t.cuMemAllocFromPoolAsync = [](CUdeviceptr* p, std::size_t size, CUmemoryPool, CUstream) {
    return ++calls[id_cuMemAllocFromPoolAsync], *p = bump(size), CUDA_SUCCESS;
  };
  t.cuMemAddressReserve = [](CUdeviceptr* p, std::size_t size, std::size_t, CUdeviceptr, unsigned long long) {
    return ++calls[id_cuMemAddressReserve], *p = bump(size), CUDA_SUCCESS;
  };
  t.cuMemCreate = [](CUmemGenericAllocationHandle* h, std::size_t, const CUmemAllocationProp*, unsigned long long) {
    return ++calls[id_cuMemCreate], *h = next_handle++, CUDA_SUCCESS;
  };
  t.cuMemHostAlloc = [](void** p, std::size_t size, unsigned) {
    return ++calls[id_cuMemHostAlloc], *p = reinterpret_cast<void*>(bump(size)), CUDA_SUCCESS;
  };
  t.cuMemHostGetDevicePointer = [](CUdeviceptr* d, void* p, unsigned) {
    return ++calls[id_cuMemHostGetDevicePointer], *d = reinterpret_cast<CUdeviceptr>(p), CUDA_SUCCESS;
  };
  return t;
}

}  // namespace pvmm::cuda::fake
