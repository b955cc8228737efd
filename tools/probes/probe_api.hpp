// The runtime API the probes call, chosen at compile time: the CUDA runtime by default, HIP's with -DPROBE_HIP
// (on NVIDIA: -D__HIP_PLATFORM_NVIDIA__ -I <hip-nvidia>/include). API(MemPoolCreate) is cudaMemPoolCreate or
// hipMemPoolCreate; CHECK(call) exits the probe naming the failed call. Header-only: each probe builds from one
// source file (tools/probes/run.sh).
#pragma once

#ifdef PROBE_HIP
#include <hip/hip_runtime_api.h>
#define API(name) hip##name
#define API_NAME "hip"
#ifdef __HIP_PLATFORM_NVIDIA__
#define API_LABEL "HIP (NVIDIA platform)"
#else
#define API_LABEL "HIP"
#endif
#define POOLS_SUPPORTED_ATTR hipDeviceAttributeMemoryPoolsSupported
#define DEVICE_PROP hipDeviceProp_t
#else
#include <cuda_runtime_api.h>
#define API(name) cuda##name
#define API_NAME "cuda"
#define API_LABEL "CUDA runtime"
#define POOLS_SUPPORTED_ATTR cudaDevAttrMemoryPoolsSupported
#define DEVICE_PROP cudaDeviceProp
#endif

#include <cstdio>
#include <cstdlib>

using api_error = API(Error_t);
using api_stream = API(Stream_t);
using api_event = API(Event_t);
using api_pool = API(MemPool_t);

#define CHECK(call)                                                                                           \
  do {                                                                                                        \
    api_error check_e_ = (call);                                                                              \
    if (check_e_ != API(Success)) {                                                                           \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, API(GetErrorName)(check_e_)); \
      std::exit(2);                                                                                           \
    }                                                                                                         \
  } while (0)
