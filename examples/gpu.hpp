// What the GPU examples share: one source compiles as CUDA (nvcc) and as HIP (hipcc). GPU(Malloc) names cudaMalloc
// or hipMalloc, GPU_SUCCESS the runtime's success code and GPU_NAME the runtime ("cuda" or "hip").
#pragma once

#include <cstdio>

#if defined(__HIPCC__)
#include <hip/hip_runtime.h>
#define GPU(name) hip##name
#define GPU_SUCCESS hipSuccess
#define GPU_NAME "hip"
#else
#include <cuda_runtime.h>
#define GPU(name) cuda##name
#define GPU_SUCCESS cudaSuccess
#define GPU_NAME "cuda"
#endif

// True on success; otherwise prints "<example>: rank <rank>: FAIL: <what>: <the runtime's message>".
inline bool gpu_ok(const char* example, GPU(Error_t) e, const char* what, int rank) {
  if (e == GPU_SUCCESS) return true;
  std::printf("%s: rank %d: FAIL: %s: %s\n", example, rank, what, GPU(GetErrorString)(e));
  return false;
}
