// vector_add: the seeds' flow - reserve an address range, create physical memory, map it, grant the device
// access, run a kernel on it - with pvmm doing the memory, in one source that compiles as CUDA (nvcc) and as
// HIP (hipcc). Checks its own result; exits non-zero on a wrong answer.
#include "gpu.hpp"

#include <cstdio>
#include <vector>

#include <pvmm/pvmm.hpp>

#include "common.hpp"

__global__ void add(const float* a, const float* b, float* c, std::size_t n) {
  std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

int main() {
  return example::run("vector_add", [] {
    const std::size_t n = 1 << 22, bytes = n * sizeof(float);
    pvmm::allocation_properties props;  // device 0
    const std::size_t g = pvmm::query_granularity(props).value().minimum;
    const std::size_t each = (bytes + g - 1) / g * g;

    // One reservation for the three vectors, each backed by its own physical allocation.
    auto range = pvmm::address_reservation::reserve(3 * each).value();
    std::vector<pvmm::physical_allocation> memory;
    for (int v = 0; v < 3; ++v) {
      memory.push_back(pvmm::physical_allocation::create(each, props).value());
      range.map(v * each, memory.back(), 0, each).value();
    }
    range.set_access(0, 3 * each, {{pvmm::location::device(0), pvmm::access::read_write}}).value();
    auto* a = range.at<float>(0);
    auto* b = range.at<float>(each);
    auto* c = range.at<float>(2 * each);

    std::vector<float> ha(n), hb(n), hc(n);
    for (std::size_t i = 0; i < n; ++i) ha[i] = static_cast<float>(i), hb[i] = 2.0f * static_cast<float>(i);
    if (GPU(SetDevice)(0) != GPU_SUCCESS) return 1;
    if (GPU(Memcpy)(a, ha.data(), bytes, GPU(MemcpyHostToDevice)) != GPU_SUCCESS) return 1;
    if (GPU(Memcpy)(b, hb.data(), bytes, GPU(MemcpyHostToDevice)) != GPU_SUCCESS) return 1;
    add<<<static_cast<unsigned>((n + 255) / 256), 256>>>(a, b, c, n);
    if (GPU(DeviceSynchronize)() != GPU_SUCCESS) return 1;  // before any unmap: unmapping is not ordered with work
    if (GPU(Memcpy)(hc.data(), c, bytes, GPU(MemcpyDeviceToHost)) != GPU_SUCCESS) return 1;
    for (std::size_t i = 0; i < n; ++i)
      if (hc[i] != 3.0f * static_cast<float>(i)) {
        std::printf("vector_add: FAIL at %zu: %f\n", i, hc[i]);
        return 1;
      }
    std::printf("vector_add: ok (%zu elements, three allocations in one %zu-byte reservation)\n", n, 3 * each);
    return 0;
  });
}
