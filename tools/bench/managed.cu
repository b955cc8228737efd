// pvmm-bench managed (cuda, built with a CUDA compiler): managed memory written on the host, then used by a
// kernel three ways: prefetched to the GPU first, faulted in by the kernel's first touch, or copied
// explicitly into device memory from a pinned buffer; and pvmm's prefetch call against cuMemPrefetchAsync.
// The size is 1 GiB, or a quarter of the free device memory where that is less (never more managed memory
// than the device has free).
#include <cstdint>
#include <random>
#include <vector>

#include <fmt/format.h>

#include <pvmm/pvmm.hpp>

#include "bench.hpp"

namespace bench {
namespace {

__global__ void scale(std::uint32_t* data, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x)
    data[i] = data[i] * 2 + 1;
}

void launch(void* data, std::size_t bytes, CUstream s) {
  scale<<<1024, 256, 0, reinterpret_cast<cudaStream_t>(s)>>>(static_cast<std::uint32_t*>(data), bytes / 4);
  CUDART(cudaGetLastError());
}

/// Brings every page back to the host by writing it there (untimed set-up for each round).
void touch_on_host(void* data, std::size_t bytes, std::uint32_t value) {
  auto* p = static_cast<std::uint32_t*>(data);
  for (std::size_t i = 0; i < bytes / 4; i += 1024) p[i] = value;  // one write a 4 KiB page
}

}  // namespace

void managed() {
  const auto caps = pvmm::query_device(0).value().capabilities.managed;
  if (!caps.supported || !caps.concurrent_access) {
    fmt::print("\nmanaged: [pvmm-skip] device 0 has no concurrent managed access\n");
    return;
  }
  std::size_t free_bytes = 0, total = 0;
  CUDART(cudaMemGetInfo(&free_bytes, &total));
  const std::size_t bytes = std::min(std::size_t{1} << 30, free_bytes / 4 / (2u << 20) * (2u << 20));
  auto s = pvmm::stream::create(0).value();
  const auto native = reinterpret_cast<CUstream>(static_cast<std::uintptr_t>(s.native_handle().value));
  auto memory = pvmm::managed_allocation::create(bytes).value();
  void* data = memory.data();
  auto staging = pvmm::pinned_allocation::create(bytes).value();
  CUdeviceptr device_copy = 0;
  CU(cuMemAlloc(&device_copy, bytes));
  void* device_data = reinterpret_cast<void*>(static_cast<std::uintptr_t>(device_copy));
  const int rounds = 7;
  std::uint32_t value = 1;

  auto prefetch_then_kernel = [&] {
    touch_on_host(data, bytes, ++value);
    auto t0 = clock_type::now();
    check(pvmm::prefetch_async(data, bytes, pvmm::location::device(0), s).has_value(), "prefetch_async");
    launch(data, bytes, native);
    check(s.synchronize().has_value(), "synchronize");
    return seconds_since(t0);
  };
  auto first_touch = [&] {
    touch_on_host(data, bytes, ++value);
    auto t0 = clock_type::now();
    launch(data, bytes, native);
    check(s.synchronize().has_value(), "synchronize");
    return seconds_since(t0);
  };
  auto explicit_copy = [&] {
    touch_on_host(staging.data(), bytes, ++value);
    auto t0 = clock_type::now();
    check(s.copy_async(device_data, staging.data(), bytes).has_value(), "copy_async");
    launch(device_data, bytes, native);
    check(s.synchronize().has_value(), "synchronize");
    return seconds_since(t0);
  };
  auto kernel_only = [&] {  // the data already on the GPU: what the kernel itself costs
    auto t0 = clock_type::now();
    launch(device_data, bytes, native);
    check(s.synchronize().has_value(), "synchronize");
    return seconds_since(t0);
  };
  std::vector<double> prefetched, faulted, copied, kernel;
  std::mt19937 order(5);
  for (int r = 0; r < rounds + 1; ++r) {  // round 0 warms up and is dropped
    double t[4];
    int which[4] = {0, 1, 2, 3};
    std::shuffle(which, which + 4, order);
    for (int w : which)
      t[w] = w == 0 ? prefetch_then_kernel() : w == 1 ? first_touch() : w == 2 ? explicit_copy() : kernel_only();
    if (r == 0) continue;
    prefetched.push_back(t[0]), faulted.push_back(t[1]), copied.push_back(t[2]), kernel.push_back(t[3]);
  }
  fmt::print(
      "\nmanaged: {} MiB written on the host, then a kernel reads and writes all of it; median of {} rounds in a "
      "random order\n",
      bytes >> 20, rounds);
  fmt::print("  {:<52} {:>11} {:>11}\n", "", "ms", "GB/s");
  auto line = [&](const char* what, const std::vector<double>& v) {
    fmt::print("  {:<52} {:>11.2f} {:>11.1f}\n", what, median(v) * 1e3, static_cast<double>(bytes) / median(v) / 1e9);
  };
  line("prefetch to the GPU, then the kernel", prefetched);
  line("the kernel faults the pages in (first touch)", faulted);
  line("explicit copy from pinned memory, then the kernel", copied);
  line("the kernel alone, data already in device memory", kernel);
  fmt::print("  first touch is {:.1f}x slower than prefetching; prefetching is {:.2f}x the explicit copy\n",
             median(faulted) / median(prefetched), median(prefetched) / median(copied));

  // pvmm's prefetch call against the driver's, the pages brought back to the host before each.
  auto pvmm_prefetch = [&] {
    touch_on_host(data, bytes, ++value);
    auto t0 = clock_type::now();
    check(pvmm::prefetch_async(data, bytes, pvmm::location::device(0), s).has_value(), "prefetch_async");
    check(s.synchronize().has_value(), "synchronize");
    return seconds_since(t0);
  };
  auto raw_prefetch = [&] {
    touch_on_host(data, bytes, ++value);
    CUmemLocation to{};
    to.type = CU_MEM_LOCATION_TYPE_DEVICE;
    to.id = 0;
    auto t0 = clock_type::now();
    CU(cuMemPrefetchAsync(reinterpret_cast<CUdeviceptr>(data), bytes, to, 0, native));
    CU(cuStreamSynchronize(native));
    return seconds_since(t0);
  };
  table_header("pvmm ms", "raw ms");
  spread_row(fmt::format("prefetch {} MiB to the GPU vs cuMemPrefetchAsync", bytes >> 20),
             interleaved(rounds, pvmm_prefetch, raw_prefetch), 1e3);
  CU(cuMemFree(device_copy));
}

}  // namespace bench
