// pool_loop: the stream-ordered allocator seed's loop - allocate, run a kernel, free, every iteration - from a pvmm
// pool on a stream, next to the same loop with cudaMalloc/cudaFree (hipMalloc/hipFree), printing both times. One
// source for CUDA (nvcc) and HIP (hipcc). Checks the kernel's result; exits non-zero on a wrong answer.
#include "gpu.hpp"

#include <chrono>
#include <cstdio>
#include <vector>

#include <pvmm/pvmm.hpp>

#include "common.hpp"

__global__ void scale(float* p, std::size_t n, float by) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) p[i] = static_cast<float>(i) * by;
}

namespace {
constexpr std::size_t n = std::size_t{1} << 20;  // 4 MiB per iteration
constexpr int iterations = 1000;

bool ok(GPU(Error_t) rc, const char* what) {
  if (rc == GPU(Success)) return true;
  std::printf("pool_loop: FAIL: %s: %s\n", what, GPU(GetErrorString)(rc));
  return false;
}

/// The last iteration's result, checked on the host.
bool check(const float* device, GPU(Stream_t) s) {
  std::vector<float> host(n);
  if (!ok(GPU(MemcpyAsync)(host.data(), device, n * sizeof(float), GPU(MemcpyDeviceToHost), s), "copy back"))
    return false;
  if (!ok(GPU(StreamSynchronize)(s), "synchronize")) return false;
  for (std::size_t i = 0; i < n; i += 4099)
    if (host[i] != static_cast<float>(i) * 2.0f) {
      std::printf("pool_loop: FAIL: element %zu holds %f\n", i, host[i]);
      return false;
    }
  return true;
}
}  // namespace

int main() {
  return example::run("pool_loop", [] {
    if (!pvmm::query_device(0).value().capabilities.pools.supported) {
      std::printf("pool_loop: device 0 has no memory pools\n");
      return 0;
    }
    using clock = std::chrono::steady_clock;
    const unsigned blocks = static_cast<unsigned>((n + 255) / 256);
    auto pool = pvmm::memory_pool::create({}).value();  // keeps what it reserved (release threshold: all)
    auto stream = pvmm::stream::create(0).value();
    auto s = reinterpret_cast<GPU(Stream_t)>(static_cast<std::uintptr_t>(stream.native_handle().value));

    auto t0 = clock::now();
    float* last = nullptr;
    for (int i = 0; i < iterations; ++i) {
      auto memory = pool.allocate(n * sizeof(float), stream).value();
      scale<<<blocks, 256, 0, s>>>(static_cast<float*>(memory.data()), n, 2.0f);
      if (i + 1 == iterations) {
        last = static_cast<float*>(memory.data());
        if (!check(last, s)) return 1;
      }
      memory.free_async(stream).value();
    }
    stream.synchronize().value();
    const double pooled = std::chrono::duration<double, std::micro>(clock::now() - t0).count() / iterations;

    t0 = clock::now();
    for (int i = 0; i < iterations; ++i) {
      float* p = nullptr;
      if (!ok(GPU(Malloc)(reinterpret_cast<void**>(&p), n * sizeof(float)), "Malloc")) return 1;
      scale<<<blocks, 256, 0, s>>>(p, n, 2.0f);
      if (i + 1 == iterations && !check(p, s)) return 1;
      if (!ok(GPU(Free)(p), "Free")) return 1;  // synchronizes the device
    }
    const double plain = std::chrono::duration<double, std::micro>(clock::now() - t0).count() / iterations;
    std::printf(
        "pool_loop: %d x (allocate 4 MiB, kernel, free): pvmm pool %.2f us/iteration, %sMalloc/%sFree %.2f "
        "us/iteration (%.1fx)\n",
        iterations, pooled, GPU_NAME, GPU_NAME, plain, plain / pooled);
    return 0;
  });
}
