// CUDA backend, feature "pool": cuMemPool*, cuMemAllocFromPoolAsync, cuMemFreeAsync (entry points of CUDA 11.2;
// cuMemPoolCreate at 12.2, whose CUmemPoolProps carries maxSize; a driver without them reports no pools). Stream work
// runs in the stream's own context.
#include <cstring>
#include <iterator>

#include "backend/pool.hpp"
#include "driver.hpp"

namespace pvmm::detail::backend {
using namespace pvmm::cuda;

namespace {
bool entry_points() { return api().cuMemPoolCreate && api().cuMemAllocFromPoolAsync && api().cuMemFreeAsync; }

// The driver's pool attributes, indexed by pvmm's (in its order).
constexpr CUmemPool_attribute attributes[] = {
    CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,         CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES,
    CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES,
    CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,      CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH,
    CU_MEMPOOL_ATTR_USED_MEM_CURRENT,          CU_MEMPOOL_ATTR_USED_MEM_HIGH};
static_assert(std::size(attributes) == static_cast<std::size_t>(pool_attribute::used_high) + 1,
              "one entry per pool attribute");
CUmemPool_attribute attribute_of(pool_attribute a) {
  const auto i = static_cast<std::size_t>(a);
  return i < std::size(attributes) ? attributes[i] : CU_MEMPOOL_ATTR_RELEASE_THRESHOLD;
}
/// Where the driver reads or writes attribute `which`: an int for the flags, a 64-bit value for sizes and marks.
void* slot_of(pool_attribute which, int& flag, cuuint64_t& value) {
  return is_flag(which) ? static_cast<void*>(&flag) : &value;
}
}  // namespace

result<capabilities::pool_features> pool_capabilities(int ordinal) {
  PVMM_REQUIRE_DRIVER();
  capabilities::pool_features f;
  if (!entry_points()) return f;
  PVMM_TRY_ASSIGN(dev, device_of(ordinal));
  f.supported = attribute(dev, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED) != 0;
  f.host_location = f.supported && attribute(dev, CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED) != 0;
  f.max_size = false;  // measured: maxSize 8 MiB, 32 MiB reserved and further allocations granted (H200, driver 580)
  const bool ipc_entry_points = api().cuMemPoolExportToShareableHandle && api().cuMemPoolImportFromShareableHandle &&
                                api().cuMemPoolExportPointer && api().cuMemPoolImportPointer;
  f.ipc_posix_fd = f.supported && ipc_entry_points &&
                   (attribute(dev, CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES) &
                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0;
  return f;
}

result<pool_handle> create_pool(const pool_properties& p) {
  PVMM_REQUIRE_DRIVER();
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = contains(p.exportable, handle_types::posix_fd) ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
                                                                     : CU_MEM_HANDLE_TYPE_NONE;
  props.location = to_cuda(p.location);
  props.maxSize = p.max_size;
  CUmemoryPool pool = nullptr;
  PVMM_CU(cuMemPoolCreate, &pool, &props);
  return handle_of<pool_handle>(pool);
}

result<pool_handle> default_pool(int device) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY_ASSIGN(dev, device_of(device));
  CUmemoryPool pool = nullptr;
  PVMM_CU(cuDeviceGetDefaultMemPool, &pool, dev);
  return handle_of<pool_handle>(pool);
}

status destroy_pool(pool_handle pool) { return PVMM_CU_STATUS(cuMemPoolDestroy, native(pool)); }

status set_pool_attribute(pool_handle pool, pool_attribute which, std::uint64_t value) {
  PVMM_REQUIRE_DRIVER();
  int flag = value != 0;
  cuuint64_t v = value;  // for the high marks, 0 resets them to the current value
  PVMM_CU(cuMemPoolSetAttribute, native(pool), attribute_of(which), slot_of(which, flag, v));
  return {};
}

result<std::uint64_t> get_pool_attribute(pool_handle pool, pool_attribute which) {
  PVMM_REQUIRE_DRIVER();
  int flag = 0;
  cuuint64_t v = 0;
  PVMM_CU(cuMemPoolGetAttribute, native(pool), attribute_of(which), slot_of(which, flag, v));
  return is_flag(which) ? std::uint64_t{flag != 0} : std::uint64_t{v};
}

status trim_pool(pool_handle pool, std::size_t keep) { return PVMM_CU_STATUS(cuMemPoolTrimTo, native(pool), keep); }

status set_pool_access(pool_handle pool, const access_descriptor* grants, std::size_t count) {
  PVMM_REQUIRE_DRIVER();
  std::vector<CUmemAccessDesc> desc(count);
  for (std::size_t i = 0; i < count; ++i) desc[i] = {to_cuda(grants[i].location), to_cuda(grants[i].access)};
  PVMM_CU(cuMemPoolSetAccess, native(pool), desc.data(), count);
  return {};
}

result<access> get_pool_access(pool_handle pool, location where) {
  PVMM_REQUIRE_DRIVER();
  CUmemAccess_flags flags{};
  CUmemLocation l = to_cuda(where);
  PVMM_CU(cuMemPoolGetAccess, &flags, native(pool), &l);
  return access_of(flags);
}

// The hot path: the stream names its context, and the driver takes the call as it is whenever the caller's current
// context allows it (the common case, at the raw call's cost). Only where the driver answers that no or another
// context is current does pvmm enter the stream's context for the call (and give the caller's back).
template <class Call>
result<CUresult> in_stream_order(CUstream s, Call call) {
  const CUresult rc = call();
  if (rc != CUDA_ERROR_INVALID_CONTEXT && rc != CUDA_ERROR_CONTEXT_IS_DESTROYED) return rc;
  PVMM_TRY_ASSIGN(scope, context_scope::of_stream(s));
  return call();
}

result<void*> allocate_from_pool(pool_handle pool, std::size_t size, stream_handle s, int) {
  PVMM_REQUIRE_DRIVER();
  CUdeviceptr p = 0;
  PVMM_TRY_ASSIGN(
      rc, in_stream_order(native(s), [&] { return api().cuMemAllocFromPoolAsync(&p, size, native(pool), native(s)); }));
  if (rc != CUDA_SUCCESS) return failure(rc, "cuMemAllocFromPoolAsync");
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p));
}

status free_to_pool(void* pointer, stream_handle s, int) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY_ASSIGN(rc, in_stream_order(native(s), [&] { return api().cuMemFreeAsync(ptr(pointer), native(s)); }));
  if (rc != CUDA_SUCCESS) return failure(rc, "cuMemFreeAsync");
  return {};
}

result<owned_fd> export_pool_posix_fd(pool_handle pool) {
  PVMM_REQUIRE_DRIVER();
  int fd = -1;
  PVMM_CU(cuMemPoolExportToShareableHandle, &fd, native(pool), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  return owned_fd(fd);
}

result<pool_handle> import_pool_posix_fd(int fd, int) {
  PVMM_REQUIRE_DRIVER();
  CUmemoryPool pool = nullptr;
  // The fd travels as the handle's value (cuda.h); the driver does not take it over.
  PVMM_CU(cuMemPoolImportFromShareableHandle, &pool, reinterpret_cast<void*>(static_cast<std::uintptr_t>(fd)),
          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  return handle_of<pool_handle>(pool);
}

result<pool_pointer_record> export_pool_pointer(pool_handle, const void* pointer) {
  PVMM_REQUIRE_DRIVER();
  CUmemPoolPtrExportData data{};
  static_assert(sizeof data == sizeof(pool_pointer_record), "the driver's record is 64 bytes");
  if (CUresult rc = api().cuMemPoolExportPointer(&data, ptr(pointer)); rc != CUDA_SUCCESS)
    return failure(rc, "cuMemPoolExportPointer",
                   "an allocation is exported once the host has seen it complete: synchronize its stream first");
  pool_pointer_record out{};
  std::memcpy(out.data(), &data, sizeof data);
  return out;
}

result<void*> import_pool_pointer(pool_handle pool, const pool_pointer_record& record, std::size_t) {
  PVMM_REQUIRE_DRIVER();
  CUmemPoolPtrExportData data{};
  std::memcpy(&data, record.data(), sizeof data);
  CUdeviceptr p = 0;
  PVMM_CU(cuMemPoolImportPointer, &p, native(pool), &data);
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p));
}

}  // namespace pvmm::detail::backend
