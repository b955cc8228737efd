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
#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__
#endif
#include <hip/hip_runtime_api.h>

#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "backend.hpp"
#include "state.hpp"

namespace pvmm::detail::backend {
namespace {

constexpr int first_working_vmm = 60100000;  // ROCm 6.1: first Linux release whose VMM is not stubbed
constexpr int first_working_ipc = 60200000;  // ROCm 6.2: POSIX-fd export/import

std::string version_text(int v) { return fmt::format("{}.{}", v / 10000000, v / 100000 % 100); }

struct runtime_state {
  int version = 0;
  bool available = false;
  errc code = errc::backend_unavailable;
  std::string reason;
};

// The runtime is process-wide; its version and usability are learnt once.
const runtime_state& runtime() {
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

error unavailable() {
  const auto& r = runtime();
  return make_error(r.code, {}, {}, r.reason, "install ROCm 6.1 or later on a machine with an AMD GPU");
}

errc portable(hipError_t rc) {
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

error failure(hipError_t rc, const char* call, errc code = errc{}, std::string hint = {}) {
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

hipMemGenericAllocationHandle_t to_hip(native_handle h) {
  return reinterpret_cast<hipMemGenericAllocationHandle_t>(static_cast<std::uintptr_t>(h));
}
native_handle from_hip(hipMemGenericAllocationHandle_t h) {
  return static_cast<native_handle>(reinterpret_cast<std::uintptr_t>(h));
}

hipMemAllocationProp to_hip(const allocation_properties& p) {
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

error only_device_memory() {
  return make_error(errc::not_supported, {}, {}, "the hip backend places physical memory on devices only");
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

}  // namespace

backend_info info() {
  const auto& r = runtime();
  backend_info b;
  b.name = "hip";
  b.runtime_version = fmt::format("HIP runtime {} (headers {}.{})", r.version ? version_text(r.version) : "unknown",
                                  HIP_VERSION_MAJOR, HIP_VERSION_MINOR);
  int driver = 0;
  if (hipDriverGetVersion(&driver) == hipSuccess && driver) b.driver_version = fmt::format("driver {}", driver);
  b.available = r.available;
  b.unavailable_reason = r.reason;
  b.unavailable_code = r.code;
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
  auto& c = d.capabilities;
#if PVMM_HIP_HAS_VMM_ATTRIBUTE
  int vmm = 0;
  PVMM_HIP(hipDeviceGetAttribute, &vmm, hipDeviceAttributeVirtualMemoryManagementSupported, ordinal);
  c.virtual_memory = vmm != 0;
#else
  c.virtual_memory = true;  // the runtime is 6.1+ (checked at start) but these headers lack the attribute
#endif
  c.posix_fd_handles = c.virtual_memory && runtime().version >= first_working_ipc;
  c.fabric_handles = PVMM_HIP_HAS_FABRIC != 0;  // the header has the type; the runtime answers at export
  c.multicast = false;
  c.map_at_physical_offset = false;
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

result<granularity> allocation_granularity(const allocation_properties& p) {
  PVMM_REQUIRE_RUNTIME();
  if (p.location.type != location::kind::device) return only_device_memory();
  hipMemAllocationProp prop = to_hip(p);
  granularity g;
  PVMM_HIP(hipMemGetAllocationGranularity, &g.minimum, &prop, hipMemAllocationGranularityMinimum);
  PVMM_HIP(hipMemGetAllocationGranularity, &g.recommended, &prop, hipMemAllocationGranularityRecommended);
  return g;
}

result<std::size_t> reservation_granularity() {
  PVMM_REQUIRE_RUNTIME();
  allocation_properties p;
  auto g = allocation_granularity(p);
  if (!g) return std::move(g).error();
  return g->minimum;
}

result<native_handle> create(const allocation_properties& p, std::size_t size) {
  PVMM_REQUIRE_RUNTIME();
  if (p.location.type != location::kind::device) return only_device_memory();
  if (contains(p.exportable, handle_types::posix_fd | handle_types::fabric))
    return make_error(errc::not_supported, {}, {},
                      "HIP's hipMemAllocationProp holds one handle type: request posix_fd or fabric, not both");
  return on_device(p.location.id, [&]() -> result<native_handle> {
    hipMemAllocationProp prop = to_hip(p);
    hipMemGenericAllocationHandle_t h{};
    PVMM_HIP(hipMemCreate, &h, size, &prop, 0);
    return from_hip(h);
  });
}

status release(native_handle handle) {
  PVMM_REQUIRE_RUNTIME();
  PVMM_HIP(hipMemRelease, to_hip(handle));
  return {};
}

result<allocation_properties> properties(native_handle handle) {
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
  void* p = nullptr;
  PVMM_HIP(hipMemAddressReserve, &p, size, alignment, const_cast<void*>(hint), 0);
  if (!p)
    return make_error(errc::backend_error, {}, {}, "hipMemAddressReserve succeeded with a null address",
                      "this runtime's VMM is a stub: use ROCm 6.1 or later");
  return p;
}

status free_reservation(void* address, std::size_t size) {
  PVMM_REQUIRE_RUNTIME();
  PVMM_HIP(hipMemAddressFree, address, size);
  return {};
}

status map(void* address, std::size_t size, native_handle handle, std::size_t offset) {
  PVMM_REQUIRE_RUNTIME();
  PVMM_HIP(hipMemMap, address, size, offset, to_hip(handle), 0);
  return {};
}

status unmap(void* address, std::size_t size) {
  PVMM_REQUIRE_RUNTIME();
  PVMM_HIP(hipMemUnmap, address, size);
  return {};
}

bool set_access_spans_mappings() noexcept { return false; }

status set_access(void* address, std::size_t size, const access_descriptor* grants, std::size_t count) {
  PVMM_REQUIRE_RUNTIME();
  std::vector<hipMemAccessDesc> desc(count);
  for (std::size_t i = 0; i < count; ++i) {
    if (grants[i].location.type != location::kind::device)
      return make_error(errc::not_supported, {}, {}, "the hip backend grants access to devices only");
    desc[i].location.type = hipMemLocationTypeDevice;
    desc[i].location.id = grants[i].location.id;
    desc[i].flags = grants[i].access == access::read_write ? hipMemAccessFlagsProtReadWrite
                    : grants[i].access == access::read     ? hipMemAccessFlagsProtRead
                                                           : hipMemAccessFlagsProtNone;
  }
  PVMM_HIP(hipMemSetAccess, address, size, desc.data(), count);
  return {};
}

result<access> get_access(location where, const void* address) {
  PVMM_REQUIRE_RUNTIME();
  if (where.type != location::kind::device)
    return make_error(errc::not_supported, {}, {}, "the hip backend tracks device access only");
  hipMemLocation l{};
  l.type = hipMemLocationTypeDevice;
  l.id = where.id;
  unsigned long long flags = 0;
  PVMM_HIP(hipMemGetAccess, &flags, &l, const_cast<void*>(address));
  if (flags == hipMemAccessFlagsProtReadWrite) return access::read_write;
  if (flags == hipMemAccessFlagsProtRead) return access::read;
  return access::none;
}

result<int> export_posix_fd(native_handle handle) {
  PVMM_REQUIRE_RUNTIME();
  int fd = -1;
  PVMM_HIP(hipMemExportToShareableHandle, &fd, to_hip(handle), hipMemHandleTypePosixFileDescriptor, 0);
  return fd;
}

namespace {
error no_fabric() {
  return make_error(errc::not_supported, {}, {},
                    "these ROCm headers have no fabric handle type (hipMemHandleTypeFabric, hipMemFabricHandle_t)");
}
}  // namespace

result<fabric_handle> export_fabric(native_handle handle) {
#if PVMM_HIP_HAS_FABRIC
  PVMM_REQUIRE_RUNTIME();
  hipMemFabricHandle_t fh{};
  PVMM_HIP(hipMemExportToShareableHandle, &fh, to_hip(handle), hipMemHandleTypeFabric, 0);
  fabric_handle out;
  std::memcpy(out.bytes.data(), fh.data, out.bytes.size());
  return out;
#else
  (void)handle;
  return no_fabric();
#endif
}

result<native_handle> import_posix_fd(int fd, std::size_t) {
  PVMM_REQUIRE_RUNTIME();
  hipMemGenericAllocationHandle_t h{};
  void* os_handle = reinterpret_cast<void*>(static_cast<std::uintptr_t>(fd));  // the fd by value
  if (hipError_t rc = hipMemImportFromShareableHandle(&h, os_handle, hipMemHandleTypePosixFileDescriptor);
      rc != hipSuccess)
    return failure(rc, "hipMemImportFromShareableHandle", rc == hipErrorOutOfMemory ? errc{} : errc::invalid_handle,
                   "pass an fd exported by hipMemExportToShareableHandle");
  return from_hip(h);
}

result<native_handle> import_fabric(const fabric_handle& handle, std::size_t) {
#if PVMM_HIP_HAS_FABRIC
  PVMM_REQUIRE_RUNTIME();
  hipMemFabricHandle_t fh{};
  std::memcpy(fh.data, handle.bytes.data(), handle.bytes.size());
  hipMemGenericAllocationHandle_t h{};
  if (hipError_t rc = hipMemImportFromShareableHandle(&h, &fh, hipMemHandleTypeFabric); rc != hipSuccess)
    return failure(rc, "hipMemImportFromShareableHandle", rc == hipErrorOutOfMemory ? errc{} : errc::invalid_handle);
  return from_hip(h);
#else
  (void)handle;
  return no_fabric();
#endif
}

namespace {
error no_multicast() {
  return make_error(errc::not_supported, {}, {}, "HIP has no multicast objects", "use the cuda backend on NVLink");
}
}  // namespace

result<granularity> multicast_granularity(const multicast_request&) { return no_multicast(); }
result<native_handle> multicast_create(const multicast_request&) { return no_multicast(); }
status multicast_add_device(native_handle, int) { return no_multicast(); }
status multicast_bind(native_handle, std::size_t, native_handle, std::size_t, std::size_t) { return no_multicast(); }
status multicast_unbind(native_handle, int, std::size_t, std::size_t) { return no_multicast(); }

namespace {
int device_with_access(const void* address, int device) {
  if (device >= 0) return device;
  int n = 0;
  if (hipGetDeviceCount(&n) != hipSuccess) return 0;
  for (int d = 0; d < n; ++d) {
    auto a = get_access(location::device(d), address);
    if (a && *a != access::none) return d;
  }
  return 0;
}
}  // namespace

status copy_to_mapping(void* destination, const void* source, std::size_t size, int device) {
  PVMM_REQUIRE_RUNTIME();
  return on_device(device_with_access(destination, device), [&]() -> status {
    PVMM_HIP(hipMemcpy, destination, source, size, hipMemcpyHostToDevice);
    if (hipError_t rc = hipDeviceSynchronize(); rc != hipSuccess) return failure(rc, "hipDeviceSynchronize");
    return {};
  });
}

status copy_from_mapping(void* destination, const void* source, std::size_t size, int device) {
  PVMM_REQUIRE_RUNTIME();
  return on_device(device_with_access(source, device), [&]() -> status {
    PVMM_HIP(hipMemcpy, destination, source, size, hipMemcpyDeviceToHost);
    return {};
  });
}

result<bool> write_faults(void*) {
  return make_error(errc::not_supported, {}, {}, "a faulting device write would abort the HIP runtime");
}

}  // namespace pvmm::detail::backend
