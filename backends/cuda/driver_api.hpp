// The CUDA driver entry points pvmm uses, loaded at run time (no link-time libcuda). The table can be
// replaced (install_driver_api) to record or fail calls: that is how multicast is verified without ever
// creating a multicast object on shared machines.
#pragma once

#include <cuda.h>

#include <string>

namespace pvmm::cuda {

/// What a missing entry means when the driver is loaded.
enum class entry_need {
  required,        ///< the driver is unusable without it: loading fails, naming the entry
  optional,        ///< the capability that needs it reports itself absent (pools, multicast: checked where used)
  optional_exact,  ///< optional, and only in the ABI of exactly `version`: a driver older than that version answers
                   ///< an older ABI under the same name, so there the entry counts as missing
};

// The device-ordinal ABI of cuMemAdvise and cuMemPrefetchAsync (CUDA 8.0), which cuda.h 13 no longer declares: what
// drivers older than 12.2 have.
using cuMemAdvise_device_t = CUresult (*)(CUdeviceptr, size_t, CUmem_advise, CUdevice);
using cuMemPrefetchAsync_device_t = CUresult (*)(CUdeviceptr, size_t, CUdevice, CUstream);
// cuCtxCreate's ABI before CUDA 13's params argument (CUDA 3.2 to 12.x; 13's drivers still answer it).
using cuCtxCreate_v2_t = CUresult (*)(CUcontext*, unsigned int, CUdevice);

// Every entry point pvmm uses, in one list (as NCCL's cudawrap lists its symbols):
//   X(name, version, need): `name` in the prototype cuda.h declares, resolved at exactly `version`, the CUDA version
//     whose ABI of `name` matches that prototype (asking for the header's own version would return newer ABIs:
//     CUDA 13's cuCtxSynchronize takes a context);
//   X_AS(field, name, prototype, version, need): `name` resolved at `version` into `field`, for an older ABI than
//     the one cuda.h declares under the name.
// Pools (CUDA 11.2), multicast (12.1), the location ABI of advice and prefetch (12.2) and what the driver path of team
// signals needs (64-bit stream memory operations, a context of its own) are optional: older drivers report those
// capabilities absent. Everything else is required.
#define PVMM_CUDA_ENTRY_POINTS(X, X_AS)                                                            \
  X(cuInit, 2000, required)                                                                        \
  X(cuDriverGetVersion, 2020, required)                                                            \
  X(cuGetErrorName, 6000, required)                                                                \
  X(cuGetErrorString, 6000, required)                                                              \
  X(cuDeviceGet, 2000, required)                                                                   \
  X(cuDeviceGetCount, 2000, required)                                                              \
  X(cuDeviceGetName, 2000, required)                                                               \
  X(cuDeviceGetAttribute, 2000, required)                                                          \
  X(cuDeviceCanAccessPeer, 4000, required)                                                         \
  X(cuDeviceGetPCIBusId, 4010, required)                                                           \
  X(cuDeviceTotalMem, 3020, required)                                                              \
  X(cuDevicePrimaryCtxRetain, 7000, required)                                                      \
  X(cuCtxGetCurrent, 4000, required)                                                               \
  X(cuCtxSetCurrent, 4000, required)                                                               \
  X(cuCtxPushCurrent, 4000, required)                                                              \
  X(cuCtxPopCurrent, 4000, required)                                                               \
  X(cuCtxSynchronize, 2000, required)                                                              \
  X(cuCtxDestroy, 4000, optional)                                                                  \
  X(cuMemGetInfo, 3020, required)                                                                  \
  X(cuMemcpyHtoD, 3020, required)                                                                  \
  X(cuMemcpyDtoH, 3020, required)                                                                  \
  X(cuStreamCreate, 2000, required)                                                                \
  X(cuStreamDestroy, 4000, required)                                                               \
  X(cuStreamSynchronize, 2000, required)                                                           \
  X(cuStreamQuery, 2000, required)                                                                 \
  X(cuStreamWriteValue64, 12000, optional)                                                         \
  X(cuStreamWaitValue64, 12000, optional)                                                          \
  X(cuStreamWaitEvent, 3020, required)                                                             \
  X(cuStreamGetCtx, 9020, required)                                                                \
  X(cuLaunchHostFunc, 10000, required)                                                             \
  X(cuStreamIsCapturing, 10000, optional)                                                          \
  X(cuModuleLoadData, 2000, optional)                                                              \
  X(cuModuleGetFunction, 2000, optional)                                                           \
  X(cuLaunchKernel, 4000, optional)                                                                \
  X(cuMemcpyAsync, 4000, required)                                                                 \
  X(cuEventCreate, 2000, required)                                                                 \
  X(cuEventDestroy, 4000, required)                                                                \
  X(cuEventRecord, 2000, required)                                                                 \
  X(cuEventSynchronize, 2000, required)                                                            \
  X(cuEventQuery, 2000, required)                                                                  \
  X(cuDeviceGetDefaultMemPool, 11020, optional)                                                    \
  X(cuMemPoolCreate, 12020, optional)                                                              \
  X(cuMemPoolDestroy, 11020, optional)                                                             \
  X(cuMemPoolSetAttribute, 11020, optional)                                                        \
  X(cuMemPoolGetAttribute, 11020, optional)                                                        \
  X(cuMemPoolTrimTo, 11020, optional)                                                              \
  X(cuMemPoolSetAccess, 11020, optional)                                                           \
  X(cuMemPoolGetAccess, 11020, optional)                                                           \
  X(cuMemAllocFromPoolAsync, 11020, optional)                                                      \
  X(cuMemFreeAsync, 11020, optional)                                                               \
  X(cuMemPoolExportToShareableHandle, 11020, optional)                                             \
  X(cuMemPoolImportFromShareableHandle, 11020, optional)                                           \
  X(cuMemPoolExportPointer, 11020, optional)                                                       \
  X(cuMemPoolImportPointer, 11020, optional)                                                       \
  X(cuMemAllocManaged, 6000, required)                                                             \
  X(cuMemFree, 3020, required)                                                                     \
  X(cuMemAdvise, 12020, optional_exact)                                                            \
  X(cuMemPrefetchAsync, 12020, optional_exact)                                                     \
  X_AS(cuMemAdvise_device, cuMemAdvise, cuMemAdvise_device_t, 8000, optional)                      \
  X_AS(cuMemPrefetchAsync_device, cuMemPrefetchAsync, cuMemPrefetchAsync_device_t, 8000, optional) \
  X_AS(cuCtxCreate_v2, cuCtxCreate, cuCtxCreate_v2_t, 3020, optional)                              \
  X(cuMemRangeGetAttribute, 8000, required)                                                        \
  X(cuStreamAttachMemAsync, 6000, required)                                                        \
  X(cuMemHostAlloc, 2020, required)                                                                \
  X(cuMemFreeHost, 2000, required)                                                                 \
  X(cuMemHostRegister, 6050, required)                                                             \
  X(cuMemHostUnregister, 4000, required)                                                           \
  X(cuMemHostGetDevicePointer, 3020, required)                                                     \
  X(cuMemGetAllocationGranularity, 10020, required)                                                \
  X(cuMemCreate, 10020, required)                                                                  \
  X(cuMemRelease, 10020, required)                                                                 \
  X(cuMemGetAllocationPropertiesFromHandle, 10020, required)                                       \
  X(cuMemAddressReserve, 10020, required)                                                          \
  X(cuMemAddressFree, 10020, required)                                                             \
  X(cuMemMap, 10020, required)                                                                     \
  X(cuMemUnmap, 10020, required)                                                                   \
  X(cuMemSetAccess, 10020, required)                                                               \
  X(cuMemGetAccess, 10020, required)                                                               \
  X(cuMemExportToShareableHandle, 10020, required)                                                 \
  X(cuMemImportFromShareableHandle, 10020, required)                                               \
  X(cuMemGetHandleForAddressRange, 11070, optional)                                                \
  X(cuMulticastGetGranularity, 12010, optional)                                                    \
  X(cuMulticastCreate, 12010, optional)                                                            \
  X(cuMulticastAddDevice, 12010, optional)                                                         \
  X(cuMulticastBindMem, 12010, optional)                                                           \
  X(cuMulticastUnbind, 12010, optional)

struct driver_api {
#define PVMM_CUDA_FIELD(name, version, need) decltype(&::name) name = nullptr;
#define PVMM_CUDA_FIELD_AS(field, name, prototype, version, need) prototype field = nullptr;
  PVMM_CUDA_ENTRY_POINTS(PVMM_CUDA_FIELD, PVMM_CUDA_FIELD_AS)
#undef PVMM_CUDA_FIELD
#undef PVMM_CUDA_FIELD_AS
};

/// What the table says a missing entry means, applied to `table` loaded from a driver of `version`: entries
/// optional_exact whose ABI the driver is too old for are set null; returns the required entries that are missing
/// ("cuMemCreate (CUDA 10.2), ..."; empty when none is). The loader refuses a driver that lacks any.
std::string apply_entry_needs(driver_api& table, int version);

/// Replaces the driver table (tests only; the table must outlive its use). Marks the backend available,
/// as if a driver with this table were loaded. Returns the table in use before (null if none was loaded).
const driver_api* install_driver_api(const driver_api* api) noexcept;

}  // namespace pvmm::cuda
