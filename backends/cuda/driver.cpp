// Hot layout: loaded_driver is listed by mangled name in cmake/hot_layout.ld; a rename or a new signature drops it out
// of the layout (the CTest tools/hot_layout says so).
//
// The CUDA backend's driver: libcuda opened at run time through versioned entry points (binaries start on
// machines without an NVIDIA driver and say so), the table tests can swap, and the translations every feature
// file shares.
#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <mutex>
#include <type_traits>
#include <utility>

#include "driver.hpp"

#include "backend/fork_guard.hpp"

namespace pvmm::cuda {
namespace {

std::mutex state_mutex;  // guards primary[] and install_driver_api; never taken on the hot path

using get_proc_v2 = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
using get_proc_v1 = CUresult (*)(const char*, void**, int, cuuint64_t);

}  // namespace

std::string apply_entry_needs(driver_api& table, int version) {
  std::string missing;
  auto check = [&](const char* name, int since, entry_need need, auto& field) {
    if (need == entry_need::optional_exact && version < since) field = nullptr;  // the name answers an older ABI
    if (!field && need == entry_need::required)
      missing += fmt::format("{}{} (CUDA {}.{})", missing.empty() ? "" : ", ", name, since / 1000, since % 1000 / 10);
  };
#define PVMM_CUDA_CHECK(name, since, need) check(#name, since, entry_need::need, table.name);
#define PVMM_CUDA_CHECK_AS(field, name, prototype, since, need) check(#field, since, entry_need::need, table.field);
  PVMM_CUDA_ENTRY_POINTS(PVMM_CUDA_CHECK, PVMM_CUDA_CHECK_AS)
#undef PVMM_CUDA_CHECK
#undef PVMM_CUDA_CHECK_AS
  return missing;
}

namespace {

void load(driver_state& s) {
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    s.reason = fmt::format("no CUDA driver: libcuda.so.1 could not be loaded ({})", ::dlerror());
    return;
  }
  auto v2 = reinterpret_cast<get_proc_v2>(::dlsym(lib, "cuGetProcAddress_v2"));
  auto v1 = reinterpret_cast<get_proc_v1>(::dlsym(lib, "cuGetProcAddress"));
  if (!v2 && !v1) {
    s.reason = "the CUDA driver has no cuGetProcAddress (driver older than CUDA 11.3)";
    return;
  }
  auto resolve = [&](const char* name, int version, auto& field) {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult found{};
    CUresult rc = v2 ? v2(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &found)
                     : v1(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT);
    field = rc == CUDA_SUCCESS ? reinterpret_cast<std::remove_reference_t<decltype(field)>>(fn) : nullptr;
  };
#define PVMM_CUDA_RESOLVE(name, version, need) resolve(#name, version, s.loaded.name);
#define PVMM_CUDA_RESOLVE_AS(field, name, prototype, version, need) resolve(#name, version, s.loaded.field);
  PVMM_CUDA_ENTRY_POINTS(PVMM_CUDA_RESOLVE, PVMM_CUDA_RESOLVE_AS)
#undef PVMM_CUDA_RESOLVE
#undef PVMM_CUDA_RESOLVE_AS
  if (!s.loaded.cuInit || !s.loaded.cuDriverGetVersion) {
    s.reason = "the CUDA driver lacks cuInit";
    return;
  }
  s.api = &s.loaded;
  s.loaded.cuDriverGetVersion(&s.version);
  CUresult rc = s.loaded.cuInit(0);
  if (rc != CUDA_SUCCESS) {
    const char* name = "unknown";
    if (s.loaded.cuGetErrorName) s.loaded.cuGetErrorName(rc, &name);
    s.reason = fmt::format("cuInit failed: {} ({})", name, static_cast<int>(rc));
    return;
  }
  // What a missing entry means is in the table: a missing optional one turns off the capability that needs it (its
  // feature file checks the entry), a missing required one makes the driver unusable.
  const std::string missing = apply_entry_needs(s.loaded, s.version);
  if (!missing.empty()) {
    s.reason = fmt::format("the CUDA driver {}.{} lacks entry points pvmm needs: {}; install a newer NVIDIA driver",
                           s.version / 1000, s.version % 1000 / 10, missing);
    return;
  }
  s.available = true;
  detail::note_driver_initialised();
}

}  // namespace

std::atomic<driver_state*> loaded_driver{nullptr};

driver_state& load_driver() {
  // Loaded once, thread-safely (a function-local static). Never freed: the driver stays loaded for the life of
  // the process.
  static driver_state* const state = [] {
    auto* s = new driver_state();
    load(*s);
    return s;
  }();
  loaded_driver.store(state, std::memory_order_release);
  return *state;
}

error unavailable() {
  return detail::make_error(errc::backend_unavailable, driver().reason,
                            "install the NVIDIA driver, or build with PVMM_BACKEND=host");
}

const char* error_name(CUresult rc) {
  const char* name = nullptr;
  if (driver().api && api().cuGetErrorName && api().cuGetErrorName(rc, &name) == CUDA_SUCCESS && name) return name;
  return "CUDA_ERROR_UNKNOWN";
}

errc portable(CUresult rc) {
  // The driver's codes that have a portable meaning; every other is a backend_error.
  static constexpr std::pair<CUresult, errc> named[] = {
      {CUDA_ERROR_INVALID_VALUE, errc::invalid_argument},     {CUDA_ERROR_OUT_OF_MEMORY, errc::out_of_memory},
      {CUDA_ERROR_NOT_SUPPORTED, errc::not_supported},        {CUDA_ERROR_NOT_PERMITTED, errc::not_permitted},
      {CUDA_ERROR_INVALID_DEVICE, errc::invalid_device},      {CUDA_ERROR_NOT_INITIALIZED, errc::backend_unavailable},
      {CUDA_ERROR_NO_DEVICE, errc::backend_unavailable},      {CUDA_ERROR_INVALID_HANDLE, errc::invalid_handle},
      {CUDA_ERROR_ALREADY_MAPPED, errc::overlapping_mapping}, {CUDA_ERROR_NOT_MAPPED, errc::not_mapped}};
  const auto* found = std::find_if(std::begin(named), std::end(named), [rc](const auto& n) { return n.first == rc; });
  return found != std::end(named) ? found->second : errc::backend_error;
}

error failure(CUresult rc, const char* call, std::string hint, errc code) {
  error e;
  e.code = code == errc{} ? portable(rc) : code;
  const char* text = nullptr;
  if (driver().api && api().cuGetErrorString) api().cuGetErrorString(rc, &text);
  e.detail = fmt::format("{} failed: {}", call, text ? text : "unknown error");
  e.native_name = error_name(rc);
  e.native_code = static_cast<long long>(rc);
  e.hint = std::move(hint);
  detail::explain_fork(e);
  return e;
}

result<context_scope> context_scope::primary(int ordinal) {
  auto& s = driver();
  CUcontext primary = nullptr;
  {
    std::lock_guard<std::mutex> lock(state_mutex);
    if (s.primary.size() <= static_cast<std::size_t>(ordinal)) s.primary.resize(ordinal + 1, nullptr);
    if (!s.primary[ordinal]) {
      CUdevice dev = 0;
      if (CUresult rc = s.api->cuDeviceGet(&dev, ordinal); rc != CUDA_SUCCESS) return failure(rc, "cuDeviceGet");
      if (CUresult rc = s.api->cuDevicePrimaryCtxRetain(&s.primary[ordinal], dev); rc != CUDA_SUCCESS)
        return failure(rc, "cuDevicePrimaryCtxRetain");
    }
    primary = s.primary[ordinal];
  }
  return enter(primary);
}

result<context_scope> context_scope::of_stream(CUstream stream) {
  CUcontext context = nullptr;
  if (CUresult rc = api().cuStreamGetCtx(stream, &context); rc != CUDA_SUCCESS) return failure(rc, "cuStreamGetCtx");
  return enter(context);
}

result<context_scope> context_scope::enter(CUcontext context) {
  CUcontext current = nullptr;
  if (CUresult rc = api().cuCtxGetCurrent(&current); rc != CUDA_SUCCESS) return failure(rc, "cuCtxGetCurrent");
  if (current == context) return context_scope(false);  // already there: nothing to undo
  if (CUresult rc = api().cuCtxPushCurrent(context); rc != CUDA_SUCCESS) return failure(rc, "cuCtxPushCurrent");
  return context_scope(true);
}

context_scope::~context_scope() {
  if (!pushed_) return;
  CUcontext popped = nullptr;
  (void)api().cuCtxPopCurrent(&popped);  // teardown: the push succeeded, so the pop has what to pop
}

/// An import that fails for any reason but resources or permission was handed something that is not
/// importable memory.
errc import_failure_code(CUresult rc) {
  if (rc == CUDA_ERROR_OUT_OF_MEMORY || rc == CUDA_ERROR_NOT_PERMITTED || rc == CUDA_ERROR_NOT_SUPPORTED)
    return portable(rc);
  return errc::invalid_handle;
}

location from_cuda(const CUmemLocation& l) {
  switch (l.type) {
    case CU_MEM_LOCATION_TYPE_HOST:
      return location::host();
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
      return location::host_numa(l.id);
    default:
      return location::device(l.id);
  }
}

unsigned long long to_cuda(handle_types t) {
  unsigned long long bits = 0;
  if (contains(t, handle_types::posix_fd)) bits |= CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  if (contains(t, handle_types::fabric)) bits |= CU_MEM_HANDLE_TYPE_FABRIC;
  return bits;
}

CUmemAllocationProp to_cuda(const allocation_properties& p) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = to_cuda(p.location);
  prop.requestedHandleTypes = static_cast<CUmemAllocationHandleType>(to_cuda(p.exportable));
  prop.allocFlags.gpuDirectRDMACapable = p.gpu_direct_rdma ? 1 : 0;
  prop.allocFlags.compressionType = p.compression ? CU_MEM_ALLOCATION_COMP_GENERIC : 0;
  return prop;
}

CUmulticastObjectProp to_cuda(const detail::backend::multicast_request& r) {
  CUmulticastObjectProp prop{};
  prop.numDevices = r.team_size;
  prop.size = r.size;
  prop.handleTypes = to_cuda(r.exportable);
  return prop;
}

access access_of(unsigned long long flags) {
  if (flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) return access::read_write;
  if (flags == CU_MEM_ACCESS_FLAGS_PROT_READ) return access::read;
  return access::none;
}

result<CUdevice> device_of(int ordinal) {
  CUdevice dev = 0;
  PVMM_CU(cuDeviceGet, &dev, ordinal);
  return dev;
}

int attribute(CUdevice dev, CUdevice_attribute which) {
  int value = 0;
  if (api().cuDeviceGetAttribute(&value, which, dev) != CUDA_SUCCESS) return 0;  // unknown attribute: absent
  return value;
}

result<bool> has_attribute(int ordinal, CUdevice_attribute which) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY_ASSIGN(dev, device_of(ordinal));
  return attribute(dev, which) != 0;
}

result<int> export_fd(CUmemGenericAllocationHandle h) {
  PVMM_REQUIRE_DRIVER();
  int fd = -1;
  PVMM_CU(cuMemExportToShareableHandle, &fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  return fd;
}

result<CUmemGenericAllocationHandle> import_fd(int fd, const char* hint) {
  PVMM_REQUIRE_DRIVER();
  CUmemGenericAllocationHandle h = 0;
  void* os_handle = reinterpret_cast<void*>(static_cast<std::uintptr_t>(fd));  // the fd by value
  // The driver answers "invalid value" or "unknown" for an (open) fd that names no CUDA memory.
  if (CUresult rc = api().cuMemImportFromShareableHandle(&h, os_handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
      rc != CUDA_SUCCESS)
    return failure(rc, "cuMemImportFromShareableHandle", hint, import_failure_code(rc));
  return h;
}

result<fabric_handle> export_fabric_handle(CUmemGenericAllocationHandle h) {
  PVMM_REQUIRE_DRIVER();
  CUmemFabricHandle fh{};
  if (CUresult rc = api().cuMemExportToShareableHandle(&fh, h, CU_MEM_HANDLE_TYPE_FABRIC, 0); rc != CUDA_SUCCESS)
    return failure(rc, "cuMemExportToShareableHandle", rc == CUDA_ERROR_NOT_PERMITTED ? imex_hint : "");
  fabric_handle out;
  static_assert(sizeof(fh.data) == sizeof(out.bytes), "fabric handle size");
  std::memcpy(out.bytes.data(), fh.data, sizeof(fh.data));
  return out;
}

result<CUmemGenericAllocationHandle> import_fabric_handle(const fabric_handle& handle) {
  PVMM_REQUIRE_DRIVER();
  CUmemFabricHandle fh{};
  std::memcpy(fh.data, handle.bytes.data(), sizeof(fh.data));
  CUmemGenericAllocationHandle h = 0;
  if (CUresult rc = api().cuMemImportFromShareableHandle(&h, &fh, CU_MEM_HANDLE_TYPE_FABRIC); rc != CUDA_SUCCESS) {
    // With no IMEX channel the driver refuses fabric imports as "not permitted" or "not supported" even on
    // devices that support fabric handles: both mean the system, not the device, says no.
    if (rc == CUDA_ERROR_NOT_PERMITTED || rc == CUDA_ERROR_NOT_SUPPORTED)
      return failure(rc, "cuMemImportFromShareableHandle", imex_hint, errc::not_permitted);
    return failure(rc, "cuMemImportFromShareableHandle", "", import_failure_code(rc));
  }
  return h;
}

const driver_api* install_driver_api(const driver_api* table) noexcept {
  auto& s = driver();
  std::lock_guard<std::mutex> lock(state_mutex);
  const driver_api* before = s.api;
  s.api = table;
  s.available = table != nullptr;
  s.reason = table ? "" : "driver table removed";
  s.primary.clear();
  return before;
}

}  // namespace pvmm::cuda
