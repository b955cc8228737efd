// The HIP backend's internals shared by its feature files: the runtime's version gate, the translation of
// hipError_t into pvmm's errors, the current-device guard and type conversions.
//
// The HIP backend: the contract on ROCm's hipMem* calls, for the ROCm releases whose VMM works (6.1+;
// POSIX-fd export/import from 6.2). Header differences between ROCm releases are detected at configure time
// (PVMM_HIP_HAS_* below, from CMake); the runtime's version is checked when the backend starts: before 6.1
// the VMM entry points exist but are stubs, so pvmm refuses to use them and says so.
//
// HIP restrictions and how the portable semantics absorb them:
// - mapping offset must be 0: capability map_at_physical_offset = false; the neutral layer refuses others;
// - set_access/unmap must cover whole mappings: the neutral layer already works on whole mappings, and this
//   backend asks for one set_access call per mapping (set_access_spans_mappings = false);
// - the address hint is best effort: the neutral layer compares and gives back a misplaced range;
// - hipMemCreate allocates on the current device: it is set for the call and restored;
// - hipMemRetainAllocationHandle's reference counting changed between releases: pvmm does not use it.
#pragma once

#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__
#endif
#include <hip/hip_runtime_api.h>

#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "backend/error_helpers.hpp"

namespace pvmm::detail::backend::hip {

inline constexpr int first_working_vmm = 60100000;  // ROCm 6.1: first Linux release whose VMM is not stubbed
inline constexpr int first_working_ipc = 60200000;  // ROCm 6.2: POSIX-fd export/import

inline std::string version_text(int v) { return fmt::format("{}.{}", v / 10000000, v / 100000 % 100); }

struct runtime_state {
  int version = 0;
  bool available = false;
  errc code = errc::backend_unavailable;
  std::string reason;
};

// The runtime is process-wide; its version and usability are learnt once.
inline const runtime_state& runtime() {
  static const runtime_state state = [] {
    runtime_state s;
    if (hipRuntimeGetVersion(&s.version) != hipSuccess) {
      s.reason = "the HIP runtime did not report its version";
      return s;
    }
    if (s.version < first_working_vmm) {
      s.code = errc::runtime_too_old;
      s.reason = fmt::format(
          "HIP runtime {} found; pvmm's HIP backend needs ROCm 6.1 or later (virtual memory management is a stub "
          "before 6.1)",
          version_text(s.version));
      return s;
    }
    int n = 0;
    hipError_t rc = hipGetDeviceCount(&n);
    if (rc != hipSuccess || n == 0) {
      s.reason = fmt::format("no AMD GPU: hipGetDeviceCount returned {}", hipGetErrorName(rc));
      return s;
    }
    s.available = true;
    return s;
  }();
  return state;
}

inline error unavailable() {
  const auto& r = runtime();
  return make_error(r.code, r.reason, "install ROCm 6.1 or later on a machine with an AMD GPU");
}

inline errc portable(hipError_t rc) {
  switch (rc) {
    case hipErrorInvalidValue:
      return errc::invalid_argument;
    case hipErrorOutOfMemory:
      return errc::out_of_memory;
    case hipErrorNotSupported:
      return errc::not_supported;
    case hipErrorInvalidDevice:
      return errc::invalid_device;
    case hipErrorNoDevice:
      return errc::backend_unavailable;
    case hipErrorInvalidHandle:
      return errc::invalid_handle;
    default:
      return errc::backend_error;
  }
}

inline error failure(hipError_t rc, const char* call, errc code = errc{}, std::string hint = {}) {
  error e;
  e.code = code == errc{} ? portable(rc) : code;
  e.detail = fmt::format("{} failed: {}", call, hipGetErrorString(rc));
  e.native_name = hipGetErrorName(rc);
  e.native_code = static_cast<long long>(rc);
  e.hint = std::move(hint);
  return e;
}

#define PVMM_REQUIRE_RUNTIME() \
  if (!runtime().available) return unavailable()
#define PVMM_HIP(call, ...) \
  if (hipError_t rc_ = call(__VA_ARGS__); rc_ != hipSuccess) return failure(rc_, #call)

inline hipMemGenericAllocationHandle_t to_hip(allocation_handle h) {
  return reinterpret_cast<hipMemGenericAllocationHandle_t>(static_cast<std::uintptr_t>(h.value));
}
inline allocation_handle from_hip(hipMemGenericAllocationHandle_t h) {
  return allocation_handle{static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(h))};
}

inline hipMemAllocationProp to_hip(const allocation_properties& p) {
  hipMemAllocationProp prop{};
  prop.type = hipMemAllocationTypePinned;
  prop.location.type = hipMemLocationTypeDevice;
  prop.location.id = p.location.id;
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

}  // namespace pvmm::detail::backend::hip
