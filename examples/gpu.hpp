// What the GPU examples share: one source compiles as CUDA (nvcc) and as HIP (hipcc). GPU(Malloc) names cudaMalloc
// or hipMalloc, GPU_SUCCESS the runtime's success code and GPU_NAME the runtime ("cuda" or "hip").
#pragma once

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
