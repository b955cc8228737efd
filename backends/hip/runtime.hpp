// The HIP backend's internals shared by its feature files: the platform, the runtime's version gate, the
// translation of hipError_t into pvmm's errors, the current-device guard and type conversions.
//
// The HIP backend: the contract on HIP's hipMem* calls, on either of HIP's platforms, chosen by the headers'
// configuration (CMake's PVMM_HIP_PLATFORM defines one):
// - AMD (__HIP_PLATFORM_AMD__): ROCm's runtime, for the releases whose VMM works (6.1+; POSIX-fd export/import
//   from 6.2). Before 6.1 the VMM entry points exist but are stubs, so pvmm refuses to use them and says so.
// - NVIDIA (__HIP_PLATFORM_NVIDIA__): HIP's headers map each hip* call inline onto CUDA (runtime and driver);
//   VMM needs CUDA 10.2. Versions read there are CUDA's (13000 for 13.0), and are gated and named as CUDA's.
// Header differences between releases and platforms are detected at configure time (PVMM_HIP_HAS_* below);
// the types that differ between platforms (handles: pointer or integer; addresses: void* or hipDeviceptr_t)
// are taken from the functions' own signatures.
//
// HIP restrictions and how the portable semantics absorb them:
// - mapping offset must be 0: capability map_at_physical_offset = false; the neutral layer refuses others;
// - set_access/unmap must cover whole mappings: the neutral layer already works on whole mappings, and this
//   backend asks for one set_access call per mapping (set_access_spans_mappings = false);
// - the address hint is best effort: the neutral layer compares and gives back a misplaced range;
// - hipMemCreate allocates on the current device: it is set for the call and restored;
// - hipMemRetainAllocationHandle's reference counting changed between releases: pvmm does not use it.
#pragma once

#if defined(__HIP_PLATFORM_AMD__) == defined(__HIP_PLATFORM_NVIDIA__)
#error \
    "the hip backend needs exactly one of __HIP_PLATFORM_AMD__ and __HIP_PLATFORM_NVIDIA__ (CMake: PVMM_HIP_PLATFORM)"
#endif
#include <hip/hip_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

#include <pvmm/memory_pool.hpp>
#include <pvmm/stream.hpp>

#include "backend/error_helpers.hpp"
#include "backend/fork_guard.hpp"
#include "backend/native_handle.hpp"

namespace pvmm::detail::backend::hip {

#if defined(__HIP_PLATFORM_NVIDIA__)
inline constexpr const char* platform = "HIP's NVIDIA platform (CUDA)";
inline constexpr int first_working_vmm = 10020;  // CUDA 10.2: the cuMem* calls HIP maps onto
inline constexpr int first_working_ipc = 10020;  // and their POSIX-fd export/import
inline constexpr const char* needed = "CUDA 10.2";
/// hipRuntimeGetVersion and hipDriverGetVersion answer CUDA's numbers here (13000 is 13.0).
inline std::string version_text(int v) { return fmt::format("CUDA {}.{}", v / 1000, v % 1000 / 10); }
#else
inline constexpr const char* platform = "ROCm";
inline constexpr int first_working_vmm = 60100000;  // ROCm 6.1: first Linux release whose VMM is not stubbed
inline constexpr int first_working_ipc = 60200000;  // ROCm 6.2: POSIX-fd export/import
inline constexpr const char* needed = "ROCm 6.1";
inline std::string version_text(int v) { return fmt::format("HIP {}.{}", v / 10000000, v / 100000 % 100); }
#endif

struct runtime_state {
  int version = 0;
  bool available = false;
  errc code = errc::backend_unavailable;
  std::string reason;
  int refused_devices = 0;  // devices the runtime sees that the backend will not use
};

/// Clears the runtime's last error once pvmm consumed a failed call (reported it, or read it as an answer): left
/// set, the caller's next hipGetLastError (cudaGetLastError on NVIDIA) would blame their own next launch for it.
/// PyTorch's caching allocator does the same after a refused allocation.
inline void forget_last_error() noexcept { (void)hipGetLastError(); }

// The runtime is process-wide; its version and usability are learnt once.
inline const runtime_state& runtime() {
  static const runtime_state state = [] {
    runtime_state s;
    int n = 0;
    const hipError_t count_rc = hipGetDeviceCount(&n);
    const hipError_t version_rc = hipRuntimeGetVersion(&s.version);
    if (count_rc != hipSuccess || version_rc != hipSuccess)
      forget_last_error();  // answers read here (hipErrorNoDevice where no GPU is), not the caller's errors
    if (version_rc != hipSuccess) {
      s.reason = fmt::format("the HIP runtime ({}) did not report its version", platform);
      s.refused_devices = count_rc == hipSuccess ? n : 0;
      return s;
    }
    if (s.version < first_working_vmm) {
      s.code = errc::runtime_too_old;
      s.reason = fmt::format("{} runtime found ({}); pvmm's hip backend needs {} or later there{}",
                             version_text(s.version), platform, needed,
                             first_working_vmm == 60100000 ? " (virtual memory management is a stub before 6.1)" : "");
      s.refused_devices = count_rc == hipSuccess ? n : 0;
      return s;
    }
    if (count_rc != hipSuccess || n == 0) {
      s.reason = fmt::format("no GPU for {}: hipGetDeviceCount returned {}", platform, hipGetErrorName(count_rc));
      return s;
    }
    note_driver_initialised();
    s.available = true;
    return s;
  }();
  return state;
}

inline error unavailable() {
  const auto& r = runtime();
  return make_error(r.code, r.reason,
                    fmt::format("install {} or later on a machine with a GPU of that platform", needed));
}

inline errc portable(hipError_t rc) {
  // The runtime's codes that have a portable meaning; every other is a backend_error.
  static constexpr std::pair<hipError_t, errc> named[] = {
      {hipErrorInvalidValue, errc::invalid_argument}, {hipErrorOutOfMemory, errc::out_of_memory},
      {hipErrorNotSupported, errc::not_supported},    {hipErrorInvalidDevice, errc::invalid_device},
      {hipErrorNoDevice, errc::backend_unavailable},  {hipErrorInvalidHandle, errc::invalid_handle}};
  const auto* found = std::find_if(std::begin(named), std::end(named), [rc](const auto& n) { return n.first == rc; });
  return found != std::end(named) ? found->second : errc::backend_error;
}

/// The one place a runtime error becomes pvmm's (every failed call pvmm reports comes here).
/// (rc, call, hint, code) in every backend: the hint, then the errc that overrides the one rc maps to.
inline error failure(hipError_t rc, const char* call, std::string hint = {}, errc code = errc{}) {
  forget_last_error();
  error e;
  e.code = code == errc{} ? portable(rc) : code;
  e.detail = fmt::format("{} failed: {}", call, hipGetErrorString(rc));
  e.native_name = hipGetErrorName(rc);
  e.native_code = static_cast<long long>(rc);
  e.hint = std::move(hint);
  explain_fork(e);
  return e;
}

#define PVMM_REQUIRE_RUNTIME()                      \
  do {                                              \
    if (!runtime().available) return unavailable(); \
  } while (0)
#define PVMM_HIP(call, ...)                                                                \
  do {                                                                                     \
    if (hipError_t rc_ = call(__VA_ARGS__); rc_ != hipSuccess) return failure(rc_, #call); \
  } while (0)
/// The whole body of a backend function that is one runtime call: `return PVMM_HIP_STATUS(hipFree, p);`
/// (PVMM_BACKEND_ONE_CALL).
#define PVMM_HIP_STATUS(call, ...) PVMM_BACKEND_ONE_CALL(PVMM_REQUIRE_RUNTIME, PVMM_HIP, call, __VA_ARGS__)

// Handles are opaque pointers on AMD and integers on NVIDIA; pvmm carries either in 64 bits.
using native_handle = hipMemGenericAllocationHandle_t;
// (Templates, so that only the platform's branch is compiled.)
template <class H = native_handle>
H to_hip(allocation_handle h) {
  if constexpr (std::is_pointer_v<H>)
    return reinterpret_cast<H>(static_cast<std::uintptr_t>(h.value));
  else
    return static_cast<H>(h.value);
}
template <class H = native_handle>
allocation_handle from_hip(H h) {
  if constexpr (std::is_pointer_v<H>)
    return allocation_handle{static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(h))};
  else
    return allocation_handle{static_cast<std::uint64_t>(h)};
}

// Addresses are void* on AMD and hipDeviceptr_t (an integer) on NVIDIA: the type hipMemAddressReserve returns.
template <class>
struct out_parameter;
template <class R, class Out, class... Rest>
struct out_parameter<R (*)(Out*, Rest...)> {
  using type = Out;
};
using native_address = typename out_parameter<decltype(&hipMemAddressReserve)>::type;
template <class A = native_address>
A to_hip(const void* p) {
  if constexpr (std::is_pointer_v<A>)
    return const_cast<void*>(p);
  else
    return static_cast<A>(reinterpret_cast<std::uintptr_t>(p));
}
template <class A = native_address>
void* from_hip_address(A a) {
  if constexpr (std::is_pointer_v<A>)
    return a;
  else
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(a));
}

/// A device attribute, 0 where the runtime does not know it (an absent capability).
inline int device_attribute(hipDeviceAttribute_t which, int ordinal) {
  int v = 0;
  if (hipDeviceGetAttribute(&v, which, ordinal) == hipSuccess) return v;
  forget_last_error();
  return 0;
}

/// Device `id` as a memory location (the only kind this backend places memory at or grants access to).
inline hipMemLocation device_location(int id) {
  hipMemLocation l{};
  l.type = hipMemLocationTypeDevice;
  l.id = id;
  return l;
}

/// An access grant's runtime flags, and the access a runtime's flags grant.
inline hipMemAccessFlags to_hip(access a) {
  return a == access::read_write ? hipMemAccessFlagsProtReadWrite
         : a == access::read     ? hipMemAccessFlagsProtRead
                                 : hipMemAccessFlagsProtNone;
}
inline access access_of(unsigned long long flags) {
  if (flags == hipMemAccessFlagsProtReadWrite) return access::read_write;
  if (flags == hipMemAccessFlagsProtRead) return access::read;
  return access::none;
}

inline hipMemAllocationProp to_hip(const allocation_properties& p) {
  hipMemAllocationProp prop{};
  prop.type = hipMemAllocationTypePinned;
  prop.location = device_location(p.location.id);
  auto handle =
      contains(p.exportable, handle_types::posix_fd) ? hipMemHandleTypePosixFileDescriptor : hipMemHandleTypeNone;
#if PVMM_HIP_HAS_FABRIC
  if (contains(p.exportable, handle_types::fabric)) handle = hipMemHandleTypeFabric;  // create() refuses both
#endif
#if PVMM_HIP_HAS_REQUESTED_HANDLE_TYPES
  prop.requestedHandleTypes = handle;
#else
  prop.requestedHandleType = handle;
#endif
  return prop;  // RDMA and compression are never requested: the device reports neither capability
}

inline error only_device_memory() {
  return make_error(errc::not_supported, "the hip backend places physical memory on devices only");
}

/// Runs `f` with `ordinal` as the current device, restoring the caller's.
template <class F>
auto on_device(int ordinal, F&& f) -> decltype(f()) {
  int previous = 0;
  if (hipError_t rc = hipGetDevice(&previous); rc != hipSuccess) return failure(rc, "hipGetDevice");
  if (previous != ordinal)
    if (hipError_t rc = hipSetDevice(ordinal); rc != hipSuccess) return failure(rc, "hipSetDevice");
  auto r = f();
  if (previous != ordinal) (void)hipSetDevice(previous);
  return r;
}

/// The native handles pvmm's opaque handles carry.
inline hipStream_t native(stream_handle h) { return native_as<hipStream_t>(h); }
inline hipEvent_t native(event_handle h) { return native_as<hipEvent_t>(h); }
inline hipMemPool_t native(pool_handle h) { return native_as<hipMemPool_t>(h); }

}  // namespace pvmm::detail::backend::hip
