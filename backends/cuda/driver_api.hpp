// The CUDA driver entry points pvmm uses, loaded at run time (no link-time libcuda). The table can be
// replaced (install_driver_api) to record or fail calls: that is how multicast is verified without ever
// creating a multicast object on shared machines.
#pragma once

#include <cuda.h>

namespace pvmm::cuda {

// X(name, the CUDA version whose ABI of `name` matches the prototype cuda.h declares under that name;
//    resolved at exactly that version)
#define PVMM_CUDA_ENTRY_POINTS(X)                  \
  X(cuInit, 2000)                                  \
  X(cuDriverGetVersion, 2020)                      \
  X(cuGetErrorName, 6000)                          \
  X(cuGetErrorString, 6000)                        \
  X(cuDeviceGet, 2000)                             \
  X(cuDeviceGetCount, 2000)                        \
  X(cuDeviceGetName, 2000)                         \
  X(cuDeviceGetAttribute, 2000)                    \
  X(cuDeviceCanAccessPeer, 4000)                   \
  X(cuDeviceGetPCIBusId, 4010)                     \
  X(cuDeviceTotalMem, 3020)                        \
  X(cuDevicePrimaryCtxRetain, 7000)                \
  X(cuCtxGetCurrent, 4000)                         \
  X(cuCtxSetCurrent, 4000)                         \
  X(cuCtxPushCurrent, 4000)                        \
  X(cuCtxPopCurrent, 4000)                         \
  X(cuCtxSynchronize, 2000)                        \
  X(cuMemGetInfo, 3020)                            \
  X(cuMemcpyHtoD, 3020)                            \
  X(cuMemcpyDtoH, 3020)                            \
  X(cuStreamCreate, 2000)                          \
  X(cuStreamDestroy, 4000)                         \
  X(cuStreamSynchronize, 2000)                     \
  X(cuStreamQuery, 2000)                           \
  X(cuStreamWaitEvent, 3020)                       \
  X(cuStreamGetCtx, 9020)                          \
  X(cuLaunchHostFunc, 10000)                       \
  X(cuMemcpyAsync, 4000)                           \
  X(cuEventCreate, 2000)                           \
  X(cuEventDestroy, 4000)                          \
  X(cuEventRecord, 2000)                           \
  X(cuEventSynchronize, 2000)                      \
  X(cuEventQuery, 2000)                            \
  X(cuDeviceGetDefaultMemPool, 11020)              \
  X(cuMemPoolCreate, 12020)                        \
  X(cuMemPoolDestroy, 11020)                       \
  X(cuMemPoolSetAttribute, 11020)                  \
  X(cuMemPoolGetAttribute, 11020)                  \
  X(cuMemPoolTrimTo, 11020)                        \
  X(cuMemPoolSetAccess, 11020)                     \
  X(cuMemPoolGetAccess, 11020)                     \
  X(cuMemAllocFromPoolAsync, 11020)                \
  X(cuMemFreeAsync, 11020)                         \
  X(cuMemPoolExportToShareableHandle, 11020)       \
  X(cuMemPoolImportFromShareableHandle, 11020)     \
  X(cuMemPoolExportPointer, 11020)                 \
  X(cuMemPoolImportPointer, 11020)                 \
  X(cuMemAllocManaged, 6000)                       \
  X(cuMemFree, 3020)                               \
  X(cuMemAdvise, 12020)                            \
  X(cuMemPrefetchAsync, 12020)                     \
  X(cuMemRangeGetAttribute, 8000)                  \
  X(cuStreamAttachMemAsync, 6000)                  \
  X(cuMemHostAlloc, 2020)                          \
  X(cuMemFreeHost, 2000)                           \
  X(cuMemHostRegister, 6050)                       \
  X(cuMemHostUnregister, 4000)                     \
  X(cuMemHostGetDevicePointer, 3020)               \
  X(cuMemGetAllocationGranularity, 10020)          \
  X(cuMemCreate, 10020)                            \
  X(cuMemRelease, 10020)                           \
  X(cuMemGetAllocationPropertiesFromHandle, 10020) \
  X(cuMemAddressReserve, 10020)                    \
  X(cuMemAddressFree, 10020)                       \
  X(cuMemMap, 10020)                               \
  X(cuMemUnmap, 10020)                             \
  X(cuMemSetAccess, 10020)                         \
  X(cuMemGetAccess, 10020)                         \
  X(cuMemExportToShareableHandle, 10020)           \
  X(cuMemImportFromShareableHandle, 10020)         \
  X(cuMulticastGetGranularity, 12010)              \
  X(cuMulticastCreate, 12010)                      \
  X(cuMulticastAddDevice, 12010)                   \
  X(cuMulticastBindMem, 12010)                     \
  X(cuMulticastUnbind, 12010)

struct driver_api {
#define PVMM_CUDA_FIELD(name, version) decltype(&::name) name = nullptr;
  PVMM_CUDA_ENTRY_POINTS(PVMM_CUDA_FIELD)
#undef PVMM_CUDA_FIELD
  // The device-ordinal ABI of cuMemAdvise and cuMemPrefetchAsync (CUDA 8.0), which cuda.h 13 no longer declares:
  // what drivers older than 12.2 have. Resolved under the same names at 8000; optional.
  CUresult (*cuMemAdvise_device)(CUdeviceptr, size_t, CUmem_advise, CUdevice) = nullptr;
  CUresult (*cuMemPrefetchAsync_device)(CUdeviceptr, size_t, CUdevice, CUstream) = nullptr;
};

/// Replaces the driver table (tests only; the table must outlive its use). Marks the backend available,
/// as if a driver with this table were loaded. Returns the table in use before (null if none was loaded).
const driver_api* install_driver_api(const driver_api* api) noexcept;

}  // namespace pvmm::cuda
