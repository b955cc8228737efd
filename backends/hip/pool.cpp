// HIP backend, feature "pool": hipMemPool*, hipMallocFromPoolAsync, hipFreeAsync (HIP 5.2+, both platforms).
// HIP's differences, absorbed here or in the neutral layer:
// - pools are device-located only (host_location false);
// - a high-mark reset sets 0 where CUDA sets the current value (the neutral layer reports CUDA's meaning);
// - on AMD, hipMemPoolExportToShareableHandle returns one cached fd on every call: pvmm hands out a dup of it;
// - hipMemPoolProps has maxSize from ROCm 6.2 (detected: PVMM_HIP_HAS_POOL_MAX_SIZE); AMD's runtime enforces it,
//   HIP's NVIDIA platform is CUDA's pool, which does not;
// - which handle types pools export is a device attribute from ROCm 6.2 (PVMM_HIP_HAS_POOL_HANDLE_TYPES); without
//   it pvmm does not claim pool sharing.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iterator>

#include "backend/pool.hpp"
#include "runtime.hpp"

namespace pvmm::detail::backend {
using namespace hip;

namespace {

// The runtime's pool attributes, indexed by pvmm's (in its order).
constexpr hipMemPoolAttr attributes[] = {hipMemPoolAttrReleaseThreshold,    hipMemPoolReuseFollowEventDependencies,
                                         hipMemPoolReuseAllowOpportunistic, hipMemPoolReuseAllowInternalDependencies,
                                         hipMemPoolAttrReservedMemCurrent,  hipMemPoolAttrReservedMemHigh,
                                         hipMemPoolAttrUsedMemCurrent,      hipMemPoolAttrUsedMemHigh};
static_assert(std::size(attributes) == static_cast<std::size_t>(pool_attribute::used_high) + 1,
              "one entry per pool attribute");
hipMemPoolAttr attribute_of(pool_attribute a) {
  const auto i = static_cast<std::size_t>(a);
  return i < std::size(attributes) ? attributes[i] : hipMemPoolAttrReleaseThreshold;
}
/// Where the runtime reads or writes attribute `which`: an int for the flags, a 64-bit value for sizes and marks.
void* slot_of(pool_attribute which, int& flag, std::uint64_t& value) {
  return is_flag(which) ? static_cast<void*>(&flag) : &value;
}
}  // namespace

result<capabilities::pool_features> pool_capabilities(int ordinal) {
  PVMM_REQUIRE_RUNTIME();
  capabilities::pool_features f;
  int supported = 0;
  PVMM_HIP(hipDeviceGetAttribute, &supported, hipDeviceAttributeMemoryPoolsSupported, ordinal);
  f.supported = supported != 0;
  f.host_location = false;  // HIP pools are device-located
#if PVMM_HIP_HAS_POOL_MAX_SIZE && defined(__HIP_PLATFORM_AMD__)
  f.max_size = f.supported;  // AMD's runtime refuses allocations past maxSize
#else
  f.max_size = false;   // no maxSize in these headers, or CUDA's pool under HIP's NVIDIA platform (not enforced)
#endif
#if PVMM_HIP_HAS_POOL_HANDLE_TYPES
  int types = 0;
  PVMM_HIP(hipDeviceGetAttribute, &types, hipDeviceAttributeMemoryPoolSupportedHandleTypes, ordinal);
  f.ipc_posix_fd =
      f.supported && runtime().version >= first_working_ipc && (types & hipMemHandleTypePosixFileDescriptor) != 0;
#endif
  return f;
}

result<pool_handle> create_pool(const pool_properties& p) {
  PVMM_REQUIRE_RUNTIME();
  if (p.location.type != location::kind::device) return only_device_memory();  // the neutral layer checked
  hipMemPoolProps props{};
  props.allocType = hipMemAllocationTypePinned;
  props.handleTypes =
      contains(p.exportable, handle_types::posix_fd) ? hipMemHandleTypePosixFileDescriptor : hipMemHandleTypeNone;
  props.location = device_location(p.location.id);
#if PVMM_HIP_HAS_POOL_MAX_SIZE
  props.maxSize = p.max_size;
#endif
  hipMemPool_t pool = nullptr;
  PVMM_HIP(hipMemPoolCreate, &pool, &props);
  return handle_of<pool_handle>(pool);
}

result<pool_handle> default_pool(int device) {
  PVMM_REQUIRE_RUNTIME();
  hipMemPool_t pool = nullptr;
  PVMM_HIP(hipDeviceGetDefaultMemPool, &pool, device);
  return handle_of<pool_handle>(pool);
}

status destroy_pool(pool_handle pool) { return PVMM_HIP_STATUS(hipMemPoolDestroy, native(pool)); }

status set_pool_attribute(pool_handle pool, pool_attribute which, std::uint64_t value) {
  PVMM_REQUIRE_RUNTIME();
  int flag = value != 0;
  std::uint64_t v = value;
  PVMM_HIP(hipMemPoolSetAttribute, native(pool), attribute_of(which), slot_of(which, flag, v));
  return {};
}

result<std::uint64_t> get_pool_attribute(pool_handle pool, pool_attribute which) {
  PVMM_REQUIRE_RUNTIME();
  int flag = 0;
  std::uint64_t v = 0;
  PVMM_HIP(hipMemPoolGetAttribute, native(pool), attribute_of(which), slot_of(which, flag, v));
  return is_flag(which) ? std::uint64_t{flag != 0} : v;
}

status trim_pool(pool_handle pool, std::size_t keep) { return PVMM_HIP_STATUS(hipMemPoolTrimTo, native(pool), keep); }

status set_pool_access(pool_handle pool, const access_descriptor* grants, std::size_t count) {
  PVMM_REQUIRE_RUNTIME();
  std::vector<hipMemAccessDesc> desc(count);
  for (std::size_t i = 0; i < count; ++i) desc[i] = {device_location(grants[i].location.id), to_hip(grants[i].access)};
  PVMM_HIP(hipMemPoolSetAccess, native(pool), desc.data(), count);
  return {};
}

result<access> get_pool_access(pool_handle pool, location where) {
  PVMM_REQUIRE_RUNTIME();
  hipMemAccessFlags flags{};
  hipMemLocation l = device_location(where.id);
  PVMM_HIP(hipMemPoolGetAccess, &flags, native(pool), &l);
  return access_of(flags);
}

result<void*> allocate_from_pool(pool_handle pool, std::size_t size, stream_handle s, int) {
  PVMM_REQUIRE_RUNTIME();
  void* p = nullptr;
  PVMM_HIP(hipMallocFromPoolAsync, &p, size, native(pool), native(s));
  return p;
}

status free_to_pool(void* pointer, stream_handle s, int) { return PVMM_HIP_STATUS(hipFreeAsync, pointer, native(s)); }

result<owned_fd> export_pool_posix_fd(pool_handle pool) {
  PVMM_REQUIRE_RUNTIME();
  int fd = -1;
  PVMM_HIP(hipMemPoolExportToShareableHandle, &fd, native(pool), hipMemHandleTypePosixFileDescriptor, 0);
#if defined(__HIP_PLATFORM_AMD__)
  // The runtime keeps this fd and returns it again on the next call: the caller gets a copy of their own.
  const int copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) return errno_error(errc::system_error, "fcntl(F_DUPFD_CLOEXEC)", errno);
  return owned_fd(copy);
#else
  return owned_fd(fd);  // CUDA's: a new fd each call
#endif
}

result<pool_handle> import_pool_posix_fd(int fd, int) {
  PVMM_REQUIRE_RUNTIME();
  hipMemPool_t pool = nullptr;
  PVMM_HIP(hipMemPoolImportFromShareableHandle, &pool, reinterpret_cast<void*>(static_cast<std::uintptr_t>(fd)),
           hipMemHandleTypePosixFileDescriptor, 0);
  return handle_of<pool_handle>(pool);
}

result<pool_pointer_record> export_pool_pointer(pool_handle, const void* pointer) {
  PVMM_REQUIRE_RUNTIME();
  hipMemPoolPtrExportData data{};
  static_assert(sizeof data == sizeof(pool_pointer_record), "HIP's record is 64 bytes");
  if (hipError_t rc = hipMemPoolExportPointer(&data, const_cast<void*>(pointer)); rc != hipSuccess)
    return failure(rc, "hipMemPoolExportPointer",
                   "an allocation is exported once the host has seen it complete: synchronize its stream first");
  pool_pointer_record out{};
  std::memcpy(out.data(), &data, sizeof data);
  return out;
}

result<void*> import_pool_pointer(pool_handle pool, const pool_pointer_record& record, std::size_t) {
  PVMM_REQUIRE_RUNTIME();
  hipMemPoolPtrExportData data{};
  std::memcpy(&data, record.data(), sizeof data);
  void* p = nullptr;
  PVMM_HIP(hipMemPoolImportPointer, &p, native(pool), &data);
  return p;
}

}  // namespace pvmm::detail::backend
