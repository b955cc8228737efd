// The CUDA backend's internals shared by its feature files: the loaded driver and its entry-point table, the
// translation of CUresult into pvmm's errors, and conversions between pvmm's and the driver's types.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <pvmm/memory_pool.hpp>
#include <pvmm/stream.hpp>

#include "backend/error_helpers.hpp"
#include "backend/multicast.hpp"
#include "backend/native_handle.hpp"
#include "core/propagate.hpp"
#include "driver_api.hpp"

namespace pvmm::cuda {

// The loaded driver. Process-wide because the driver itself is: it is loaded and initialised once.
struct driver_state {
  driver_api loaded;
  const driver_api* api = nullptr;
  bool available = false;
  std::string reason;
  int version = 0;
  std::vector<CUcontext> primary;  // retained primary context per device, for copies and memory queries
};

/// Loads the driver once (thread-safely) and returns it.
driver_state& load_driver();
/// Set when load_driver has finished: every later backend call reads it with one load instead of calling
/// into the loader (a call per driver entry, twice per operation, showed in pvmm-own-cost). Hidden: see
/// live_allocations (core/ownership.hpp).
[[gnu::visibility("hidden")]] extern std::atomic<driver_state*> loaded_driver;
inline driver_state& driver() {
  if (driver_state* s = loaded_driver.load(std::memory_order_acquire)) return *s;
  return load_driver();
}
inline const driver_api& api() { return *driver().api; }

/// backend_unavailable with the reason the driver could not be used.
error unavailable();
const char* error_name(CUresult rc);
/// The portable code of a driver error.
errc portable(CUresult rc);
/// A failed driver call: its portable code (or `code`), the driver's text, name and number, and a hint.
error failure(CUresult rc, const char* call, std::string hint = {}, errc code = errc{});
/// An import that fails for any reason but resources or permission was handed something that is not
/// importable memory.
errc import_failure_code(CUresult rc);
/// A context made current on this thread for one scope (copies, memory queries and stream work need one), and the
/// caller's own context current again when the scope ends: pvmm never leaves a program that runs in a context of
/// its own (cuCtxCreate) launching into another one.
class context_scope {
 public:
  /// Device `ordinal`'s primary context (retained once per process).
  static result<context_scope> primary(int ordinal);
  /// The context `stream` belongs to.
  static result<context_scope> of_stream(CUstream stream);
  /// `context` itself.
  static result<context_scope> of_context(CUcontext context) { return enter(context); }
  context_scope(context_scope&& other) noexcept : pushed_(other.pushed_) { other.pushed_ = false; }
  context_scope& operator=(context_scope&&) = delete;
  context_scope(const context_scope&) = delete;
  context_scope& operator=(const context_scope&) = delete;
  ~context_scope();

 private:
  static result<context_scope> enter(CUcontext context);
  explicit context_scope(bool pushed) noexcept : pushed_(pushed) {}
  bool pushed_;  // the context was pushed over the caller's and is popped at the end
};

inline constexpr const char* imex_hint =
    "fabric handles need an IMEX channel: run the nvidia-imex daemon and create "
    "/dev/nvidia-caps-imex-channels/channel0 (or load nvidia with NVreg_CreateImexChannel0=1)";

// Inline: set_access converts every grant on each call (two calls into another unit were a fifth of its wrapper).
inline CUmemLocation to_cuda(location where) {
  CUmemLocation l{};
  switch (where.type) {
    case location::kind::device:
      l.type = CU_MEM_LOCATION_TYPE_DEVICE;
      break;
    case location::kind::host:
      l.type = CU_MEM_LOCATION_TYPE_HOST;
      break;
    case location::kind::host_numa:
      l.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
      break;
  }
  l.id = where.id;
  return l;
}
location from_cuda(const CUmemLocation& l);
unsigned long long to_cuda(handle_types t);
CUmemAllocationProp to_cuda(const allocation_properties& p);
CUmulticastObjectProp to_cuda(const detail::backend::multicast_request& r);
/// An access grant's driver flags, and the access a driver's flags grant.
inline CUmemAccess_flags to_cuda(access a) {
  return a == access::read_write ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
         : a == access::read     ? CU_MEM_ACCESS_FLAGS_PROT_READ
                                 : CU_MEM_ACCESS_FLAGS_PROT_NONE;
}
access access_of(unsigned long long flags);
/// The driver's handle of device `ordinal` (the driver must be available).
result<CUdevice> device_of(int ordinal);
/// A device attribute, 0 where the driver does not know it (an absent capability).
int attribute(CUdevice dev, CUdevice_attribute which);
/// Whether device `ordinal` reports attribute `which` (a capability query).
result<bool> has_attribute(int ordinal, CUdevice_attribute which);

// Shareable handles: allocations and multicast objects are exported and imported with the same driver calls.
result<int> export_fd(CUmemGenericAllocationHandle h);
result<CUmemGenericAllocationHandle> import_fd(int fd, const char* hint);
result<fabric_handle> export_fabric_handle(CUmemGenericAllocationHandle h);
result<CUmemGenericAllocationHandle> import_fabric_handle(const fabric_handle& handle);
inline CUdeviceptr ptr(const void* p) { return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p)); }

/// The native handles pvmm's opaque handles carry.
inline CUstream native(stream_handle h) { return detail::backend::native_as<CUstream>(h); }
inline CUevent native(event_handle h) { return detail::backend::native_as<CUevent>(h); }
inline CUmemoryPool native(pool_handle h) { return detail::backend::native_as<CUmemoryPool>(h); }

}  // namespace pvmm::cuda

#define PVMM_REQUIRE_DRIVER()                                                  \
  do {                                                                         \
    if (!::pvmm::cuda::driver().available) return ::pvmm::cuda::unavailable(); \
  } while (0)
#define PVMM_CU(call, ...)                                                         \
  do {                                                                             \
    if (CUresult rc_ = ::pvmm::cuda::api().call(__VA_ARGS__); rc_ != CUDA_SUCCESS) \
      return ::pvmm::cuda::failure(rc_, #call);                                    \
  } while (0)
/// The whole body of a backend function that is one driver call: `return PVMM_CU_STATUS(cuMemRelease, h);`
/// (PVMM_BACKEND_ONE_CALL).
#define PVMM_CU_STATUS(call, ...) PVMM_BACKEND_ONE_CALL(PVMM_REQUIRE_DRIVER, PVMM_CU, call, __VA_ARGS__)
