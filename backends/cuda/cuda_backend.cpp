// The CUDA backend: the contract on the driver API's cuMem* and cuMulticast* calls.
// libcuda is opened at run time: binaries start on machines without an NVIDIA driver and say so.
#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "backend.hpp"
#include "driver_api.hpp"
#include "state.hpp"

namespace pvmm::cuda {
namespace {

// The loaded driver. Process-wide because the driver itself is: it is loaded and initialised once.
struct driver_state {
  driver_api loaded;
  const driver_api* api = nullptr;
  bool available = false;
  std::string reason;
  int version = 0;
  std::vector<CUcontext> primary;  // retained primary context per device, for copies and memory queries
};

std::mutex state_mutex;  // guards primary[] and install_driver_api; never taken on the hot path

using get_proc_v2 = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
using get_proc_v1 = CUresult (*)(const char*, void**, int, cuuint64_t);

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
  auto resolve = [&](const char* name, int version, void** fn) {
    CUdriverProcAddressQueryResult found{};
    CUresult rc = v2 ? v2(name, fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &found)
                     : v1(name, fn, version, CU_GET_PROC_ADDRESS_DEFAULT);
    if (rc != CUDA_SUCCESS) *fn = nullptr;
  };
  std::vector<const char*> missing;
  // Each symbol is asked for at the version whose signature driver_api.hpp declares: asking for the
  // header's own version would return newer ABIs (CUDA 13's cuCtxSynchronize takes a context).
#define PVMM_CUDA_RESOLVE(name, version)                             \
  resolve(#name, version, reinterpret_cast<void**>(&s.loaded.name)); \
  if (!s.loaded.name) missing.push_back(#name);
  PVMM_CUDA_ENTRY_POINTS(PVMM_CUDA_RESOLVE)
#undef PVMM_CUDA_RESOLVE
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
  // Multicast entry points appear with CUDA 12.1; older drivers simply report no multicast.
  for (const char* name : missing) {
    if (std::strncmp(name, "cuMulticast", 11) == 0) continue;
    s.reason = fmt::format("the CUDA driver {}.{} lacks {}: virtual memory management needs a newer driver",
                           s.version / 1000, s.version % 1000 / 10, name);
    return;
  }
  s.available = true;
}

driver_state& driver() {
  // Loaded once, thread-safely (a function-local static); afterwards a plain read on every call.
  // Never freed: the driver stays loaded for the life of the process.
  static driver_state* const state = [] {
    auto* s = new driver_state();
    load(*s);
    return s;
  }();
  return *state;
}

const driver_api& api() { return *driver().api; }

error unavailable() {
  return detail::make_error(errc::backend_unavailable, {}, {}, driver().reason,
                            "install the NVIDIA driver, or build with PVMM_BACKEND=host");
}

const char* error_name(CUresult rc) {
  const char* name = nullptr;
  if (driver().api && api().cuGetErrorName && api().cuGetErrorName(rc, &name) == CUDA_SUCCESS && name) return name;
  return "CUDA_ERROR_UNKNOWN";
}

errc portable(CUresult rc) {
  switch (rc) {
    case CUDA_ERROR_INVALID_VALUE:
      return errc::invalid_argument;
    case CUDA_ERROR_OUT_OF_MEMORY:
      return errc::out_of_memory;
    case CUDA_ERROR_NOT_SUPPORTED:
      return errc::not_supported;
    case CUDA_ERROR_NOT_PERMITTED:
      return errc::not_permitted;
    case CUDA_ERROR_INVALID_DEVICE:
      return errc::invalid_device;
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_NO_DEVICE:
      return errc::backend_unavailable;
    case CUDA_ERROR_INVALID_HANDLE:
      return errc::invalid_handle;
    case CUDA_ERROR_ALREADY_MAPPED:
      return errc::overlapping_mapping;
    case CUDA_ERROR_NOT_MAPPED:
      return errc::not_mapped;
    default:
      return errc::backend_error;
  }
}

error failure(CUresult rc, const char* call, std::string hint = {}, errc code = errc{}) {
  error e;
  e.code = code == errc{} ? portable(rc) : code;
  const char* text = nullptr;
  if (driver().api && api().cuGetErrorString) api().cuGetErrorString(rc, &text);
  e.detail = fmt::format("{} failed: {}", call, text ? text : "unknown error");
  e.native_name = error_name(rc);
  e.native_code = static_cast<long long>(rc);
  e.hint = std::move(hint);
  return e;
}

constexpr const char* imex_hint =
    "fabric handles need an IMEX channel: run the nvidia-imex daemon and create "
    "/dev/nvidia-caps-imex-channels/channel0 (or load nvidia with NVreg_CreateImexChannel0=1)";

/// Makes device `ordinal`'s primary context current on this thread (copies and memory queries need one).
status bind_context(int ordinal) {
  auto& s = driver();
  std::lock_guard<std::mutex> lock(state_mutex);
  if (s.primary.size() <= static_cast<std::size_t>(ordinal)) s.primary.resize(ordinal + 1, nullptr);
  if (!s.primary[ordinal]) {
    CUdevice dev = 0;
    if (CUresult rc = s.api->cuDeviceGet(&dev, ordinal); rc != CUDA_SUCCESS) return failure(rc, "cuDeviceGet");
    if (CUresult rc = s.api->cuDevicePrimaryCtxRetain(&s.primary[ordinal], dev); rc != CUDA_SUCCESS)
      return failure(rc, "cuDevicePrimaryCtxRetain");
  }
  CUcontext current = nullptr;
  s.api->cuCtxGetCurrent(&current);
  if (current != s.primary[ordinal]) {
    if (CUresult rc = s.api->cuCtxSetCurrent(s.primary[ordinal]); rc != CUDA_SUCCESS)
      return failure(rc, "cuCtxSetCurrent");
  }
  return {};
}

/// An import that fails for any reason but resources or permission was handed something that is not
/// importable memory.
errc import_failure_code(CUresult rc) {
  if (rc == CUDA_ERROR_OUT_OF_MEMORY || rc == CUDA_ERROR_NOT_PERMITTED || rc == CUDA_ERROR_NOT_SUPPORTED)
    return portable(rc);
  return errc::invalid_handle;
}

CUmemLocation to_cuda(location where) {
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

CUmulticastObjectProp to_cuda(const detail::multicast_request& r) {
  CUmulticastObjectProp prop{};
  prop.numDevices = r.team_size;
  prop.size = r.size;
  prop.handleTypes = to_cuda(r.exportable);
  return prop;
}

int attribute(CUdevice dev, CUdevice_attribute which) {
  int value = 0;
  if (api().cuDeviceGetAttribute(&value, which, dev) != CUDA_SUCCESS) return 0;  // unknown attribute: absent
  return value;
}

CUdeviceptr ptr(const void* p) { return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p)); }

}  // namespace

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

namespace pvmm::detail::backend {
using namespace pvmm::cuda;

#define PVMM_REQUIRE_DRIVER() \
  if (!driver().available) return unavailable()
#define PVMM_CU(call, ...) \
  if (CUresult rc_ = api().call(__VA_ARGS__); rc_ != CUDA_SUCCESS) return failure(rc_, #call)

backend_info info() {
  auto& s = driver();
  backend_info b;
  b.name = "cuda";
  b.runtime_version = fmt::format("CUDA headers {}.{}", CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);
  if (s.version) b.driver_version = fmt::format("CUDA driver API {}.{}", s.version / 1000, s.version % 1000 / 10);
  b.available = s.available;
  b.unavailable_reason = s.reason;
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
  CUdevice dev = 0;
  PVMM_CU(cuDeviceGet, &dev, ordinal);
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
  auto& c = d.capabilities;
  c.virtual_memory = attribute(dev, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) != 0;
  c.posix_fd_handles = attribute(dev, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED) != 0;
  c.fabric_handles = attribute(dev, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED) != 0;
  c.multicast = attribute(dev, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED) != 0 && api().cuMulticastCreate != nullptr;
  c.gpu_direct_rdma_with_vmm = attribute(dev, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED) != 0;
  c.compression = attribute(dev, CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED) != 0;
  c.host_numa_location = attribute(dev, CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) != 0;
  c.host_location = attribute(dev, CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) != 0;
  c.map_at_physical_offset = false;  // cuMemMap: "offset ... currently must be zero"
  int numa = -1;
  if (api().cuDeviceGetAttribute(&numa, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, dev) != CUDA_SUCCESS) numa = -1;
  c.host_numa_id = numa;
  return d;
}

result<memory_info> memory(int ordinal) {
  PVMM_REQUIRE_DRIVER();
  if (auto ok = bind_context(ordinal); !ok) return std::move(ok).error();
  std::size_t free = 0, total = 0;
  PVMM_CU(cuMemGetInfo, &free, &total);
  return memory_info{free, total, false};
}

result<granularity> allocation_granularity(const allocation_properties& properties) {
  PVMM_REQUIRE_DRIVER();
  CUmemAllocationProp prop = to_cuda(properties);
  granularity g;
  PVMM_CU(cuMemGetAllocationGranularity, &g.minimum, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  PVMM_CU(cuMemGetAllocationGranularity, &g.recommended, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
  return g;
}

result<std::size_t> reservation_granularity() {
  PVMM_REQUIRE_DRIVER();
  // The largest minimum granularity of any device, so any device's memory can be mapped anywhere.
  static std::atomic<std::size_t> cached{0};  // device granularities are fixed for the life of the process
  if (std::size_t known = cached.load(std::memory_order_relaxed)) return known;
  int n = 0;
  PVMM_CU(cuDeviceGetCount, &n);
  std::size_t unit = 0;
  for (int d = 0; d < n; ++d) {
    allocation_properties p;
    p.location = location::device(d);
    auto g = allocation_granularity(p);
    if (!g) return std::move(g).error();
    unit = std::max(unit, g->minimum);
  }
  if (unit == 0) return make_error(errc::backend_unavailable, {}, {}, "no CUDA device");
  cached.store(unit, std::memory_order_relaxed);
  return unit;
}

result<native_handle> create(const allocation_properties& properties, std::size_t size) {
  PVMM_REQUIRE_DRIVER();
  CUmemAllocationProp prop = to_cuda(properties);
  CUmemGenericAllocationHandle h = 0;
  if (CUresult rc = api().cuMemCreate(&h, size, &prop, 0); rc != CUDA_SUCCESS) {
    if (rc == CUDA_ERROR_NOT_PERMITTED && contains(properties.exportable, handle_types::fabric))
      return failure(rc, "cuMemCreate", imex_hint);
    return failure(rc, "cuMemCreate");
  }
  return static_cast<native_handle>(h);
}

status release(native_handle handle) {
  PVMM_REQUIRE_DRIVER();
  PVMM_CU(cuMemRelease, handle);
  return {};
}

result<allocation_properties> properties(native_handle handle) {
  PVMM_REQUIRE_DRIVER();
  CUmemAllocationProp prop{};
  PVMM_CU(cuMemGetAllocationPropertiesFromHandle, &prop, handle);
  allocation_properties p;
  p.location = from_cuda(prop.location);
  auto bits = static_cast<unsigned long long>(prop.requestedHandleTypes);
  handle_types t = handle_types::none;
  if (bits & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) t = t | handle_types::posix_fd;
  if (bits & CU_MEM_HANDLE_TYPE_FABRIC) t = t | handle_types::fabric;
  p.exportable = t;
  p.gpu_direct_rdma = prop.allocFlags.gpuDirectRDMACapable != 0;
  p.compression = prop.allocFlags.compressionType == CU_MEM_ALLOCATION_COMP_GENERIC;
  return p;
}

bool set_access_spans_mappings() noexcept { return true; }

result<void*> reserve(std::size_t size, std::size_t alignment, const void* hint) {
  PVMM_REQUIRE_DRIVER();
  CUdeviceptr p = 0;
  PVMM_CU(cuMemAddressReserve, &p, size, alignment, ptr(hint), 0);
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p));
}

status free_reservation(void* address, std::size_t size) {
  PVMM_REQUIRE_DRIVER();
  PVMM_CU(cuMemAddressFree, ptr(address), size);
  return {};
}

status map(void* address, std::size_t size, native_handle handle, std::size_t offset) {
  PVMM_REQUIRE_DRIVER();
  PVMM_CU(cuMemMap, ptr(address), size, offset, handle, 0);
  return {};
}

status unmap(void* address, std::size_t size) {
  PVMM_REQUIRE_DRIVER();
  PVMM_CU(cuMemUnmap, ptr(address), size);
  return {};
}

status set_access(void* address, std::size_t size, const access_descriptor* grants, std::size_t count) {
  PVMM_REQUIRE_DRIVER();
  CUmemAccessDesc desc[16];
  std::vector<CUmemAccessDesc> many;
  CUmemAccessDesc* out = desc;
  if (count > 16) {
    many.resize(count);
    out = many.data();
  }
  for (std::size_t i = 0; i < count; ++i) {
    out[i] = {};
    out[i].location = to_cuda(grants[i].location);
    out[i].flags = grants[i].access == access::read_write ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                   : grants[i].access == access::read     ? CU_MEM_ACCESS_FLAGS_PROT_READ
                                                          : CU_MEM_ACCESS_FLAGS_PROT_NONE;
  }
  PVMM_CU(cuMemSetAccess, ptr(address), size, out, count);
  return {};
}

result<access> get_access(location where, const void* address) {
  PVMM_REQUIRE_DRIVER();
  unsigned long long flags = 0;
  CUmemLocation l = to_cuda(where);
  PVMM_CU(cuMemGetAccess, &flags, &l, ptr(address));
  if (flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) return access::read_write;
  if (flags == CU_MEM_ACCESS_FLAGS_PROT_READ) return access::read;
  return access::none;
}

result<int> export_posix_fd(native_handle handle) {
  PVMM_REQUIRE_DRIVER();
  int fd = -1;
  PVMM_CU(cuMemExportToShareableHandle, &fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  return fd;
}

result<fabric_handle> export_fabric(native_handle handle) {
  PVMM_REQUIRE_DRIVER();
  CUmemFabricHandle fh{};
  if (CUresult rc = api().cuMemExportToShareableHandle(&fh, handle, CU_MEM_HANDLE_TYPE_FABRIC, 0); rc != CUDA_SUCCESS)
    return failure(rc, "cuMemExportToShareableHandle", rc == CUDA_ERROR_NOT_PERMITTED ? imex_hint : "");
  fabric_handle out;
  static_assert(sizeof(fh.data) == sizeof(out.bytes), "fabric handle size");
  std::memcpy(out.bytes.data(), fh.data, sizeof(fh.data));
  return out;
}

result<native_handle> import_posix_fd(int fd, std::size_t) {
  PVMM_REQUIRE_DRIVER();
  CUmemGenericAllocationHandle h = 0;
  void* os_handle = reinterpret_cast<void*>(static_cast<std::uintptr_t>(fd));  // the fd by value
  if (CUresult rc = api().cuMemImportFromShareableHandle(&h, os_handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
      rc != CUDA_SUCCESS) {
    // The driver answers "invalid value" or "unknown" for an (open) fd that names no CUDA memory.
    return failure(rc, "cuMemImportFromShareableHandle", "pass an fd exported by cuMemExportToShareableHandle",
                   import_failure_code(rc));
  }
  return static_cast<native_handle>(h);
}

result<native_handle> import_fabric(const fabric_handle& handle, std::size_t) {
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
  return static_cast<native_handle>(h);
}

namespace {
error no_multicast() {
  return make_error(errc::not_supported, {}, {}, "this CUDA driver has no multicast entry points (needs CUDA 12.1+)");
}
}  // namespace

result<granularity> multicast_granularity(const multicast_request& request) {
  PVMM_REQUIRE_DRIVER();
  if (!api().cuMulticastGetGranularity) return no_multicast();
  CUmulticastObjectProp prop = to_cuda(request);
  granularity g;
  PVMM_CU(cuMulticastGetGranularity, &g.minimum, &prop, CU_MULTICAST_GRANULARITY_MINIMUM);
  PVMM_CU(cuMulticastGetGranularity, &g.recommended, &prop, CU_MULTICAST_GRANULARITY_RECOMMENDED);
  return g;
}

result<native_handle> multicast_create(const multicast_request& request) {
  PVMM_REQUIRE_DRIVER();
  if (!api().cuMulticastCreate) return no_multicast();
  CUmulticastObjectProp prop = to_cuda(request);
  CUmemGenericAllocationHandle h = 0;
  PVMM_CU(cuMulticastCreate, &h, &prop);
  return static_cast<native_handle>(h);
}

status multicast_add_device(native_handle object, int ordinal) {
  PVMM_REQUIRE_DRIVER();
  if (!api().cuMulticastAddDevice) return no_multicast();
  CUdevice dev = 0;
  PVMM_CU(cuDeviceGet, &dev, ordinal);
  PVMM_CU(cuMulticastAddDevice, object, dev);
  return {};
}

status multicast_bind(native_handle object, std::size_t offset, native_handle memory, std::size_t memory_offset,
                      std::size_t size) {
  PVMM_REQUIRE_DRIVER();
  if (!api().cuMulticastBindMem) return no_multicast();
  PVMM_CU(cuMulticastBindMem, object, offset, memory, memory_offset, size, 0);
  return {};
}

status multicast_unbind(native_handle object, int ordinal, std::size_t offset, std::size_t size) {
  PVMM_REQUIRE_DRIVER();
  if (!api().cuMulticastUnbind) return no_multicast();
  CUdevice dev = 0;
  PVMM_CU(cuDeviceGet, &dev, ordinal);
  PVMM_CU(cuMulticastUnbind, object, dev, offset, size);
  return {};
}

namespace {
/// Binds the context of `device`, or of the first device that can read `address` (the copy runs there).
status bind_context_for(const void* address, int device) {
  if (device >= 0) return bind_context(device);
  int n = 0;
  PVMM_CU(cuDeviceGetCount, &n);
  for (int d = 0; d < n; ++d) {
    auto a = get_access(location::device(d), address);
    if (a && *a != access::none) return bind_context(d);
  }
  return make_error(errc::not_mapped, {}, {}, "no device has access to the address");
}
}  // namespace

status copy_to_mapping(void* destination, const void* source, std::size_t size, int device) {
  PVMM_REQUIRE_DRIVER();
  if (auto ok = bind_context_for(destination, device); !ok) return ok;
  PVMM_CU(cuMemcpyHtoD, ptr(destination), source, size);
  // A copy from pageable memory may return before its DMA lands: finish it, so an unmap right after is safe.
  if (CUresult rc = api().cuCtxSynchronize(); rc != CUDA_SUCCESS) return failure(rc, "cuCtxSynchronize");
  return {};
}

status copy_from_mapping(void* destination, const void* source, std::size_t size, int device) {
  PVMM_REQUIRE_DRIVER();
  if (auto ok = bind_context_for(source, device); !ok) return ok;
  PVMM_CU(cuMemcpyDtoH, destination, ptr(source), size);
  return {};
}

result<bool> write_faults(void*) {
  return make_error(errc::not_supported, {}, {},
                    "a faulting device write would poison the CUDA context; pvmm checks the grant instead");
}

}  // namespace pvmm::detail::backend
