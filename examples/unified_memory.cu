// unified_memory: the managed-memory seed's flow - allocate managed memory, advise and prefetch it to the device,
// run a kernel on it, prefetch it back and use it on the host - with pvmm doing the memory, in one source for CUDA
// (nvcc) and HIP (hipcc). It also times the kernel on pages prefetched against pages it faults in on first touch,
// where pages migrate. Checks its own result; exits non-zero on a wrong answer.
#include "gpu.hpp"

#include <chrono>
#include <cstdio>

#include <pvmm/pvmm.hpp>

#include "common.hpp"

__global__ void increment(float* p, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) p[i] += 1.0f;
}

namespace {
using clock_type = std::chrono::steady_clock;

/// Kernel time on `p`, after a prefetch to the device or not (first touch faults the pages over).
double run(float* p, std::size_t n, const pvmm::stream& s, bool prefetch) {
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<float>(i);  // on the host: the pages live there now
  if (prefetch) {
    pvmm::prefetch_async(p, n * sizeof(float), pvmm::location::device(0), s).value();
    s.synchronize().value();
  }
  auto native = reinterpret_cast<GPU(Stream_t)>(static_cast<std::uintptr_t>(s.native_handle().value));
  auto t0 = clock_type::now();
  increment<<<static_cast<unsigned>((n + 255) / 256), 256, 0, native>>>(p, n);
  s.synchronize().value();
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}
}  // namespace

int main() {
  return example::run("unified_memory", [] {
    auto caps = pvmm::query_device(0).value().capabilities.managed;
    if (!caps.supported || !caps.concurrent_access) {
      std::printf("unified_memory: device 0 has no managed memory it can prefetch to\n");
      return 0;
    }
    // 256 MiB, and never more than a quarter of what the device has free.
    std::size_t bytes = std::size_t{256} << 20;
    bytes = std::min(bytes, pvmm::query_memory(0).value().free / 4);
    const std::size_t n = bytes / sizeof(float);
    auto memory = pvmm::managed_allocation::create(bytes).value();
    auto* p = static_cast<float*>(memory.data());
    auto s = pvmm::stream::create(0).value();
    pvmm::advise(p, bytes, pvmm::advice::set_preferred_location, pvmm::location::device(0)).value();
    pvmm::advise(p, bytes, pvmm::advice::set_accessed_by, pvmm::location::host()).value();
    const double prefetched = run(p, n, s, true);
    pvmm::advise(p, bytes, pvmm::advice::unset_preferred_location).value();
    pvmm::advise(p, bytes, pvmm::advice::unset_accessed_by, pvmm::location::host()).value();
    const double faulted = run(p, n, s, false);
    pvmm::prefetch_async(p, bytes, pvmm::location::host(), s).value();
    s.synchronize().value();
    for (std::size_t i = 0; i < n; i += 4099)  // used on the host again
      if (p[i] != static_cast<float>(i) + 1.0f) {
        std::printf("unified_memory: FAIL at %zu: %f\n", i, p[i]);
        return 1;
      }
    auto where = pvmm::query_range(p, bytes).value().last_prefetch_location;
    std::printf(
        "unified_memory: %zu MiB: kernel %.2f ms on prefetched pages, %.2f ms faulting them in (%.1fx); "
        "last prefetch %s: ok\n",
        bytes >> 20, prefetched, faulted, faulted / prefetched,
        where && *where == pvmm::location::host() ? "host" : "elsewhere");
    return 0;
  });
}
