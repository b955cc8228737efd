// pvmm-bench peer: (cuda, 2 GPUs) copies into GPU 1 from GPU 0 memory through a pvmm peer mapping against
// cudaMemcpyPeer.
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <pvmm/pvmm.hpp>

#include "bench.hpp"

namespace bench {

void peer() {
  int n = 0;
  CUDART(cudaGetDeviceCount(&n));
  if (n < 2) {
    fmt::print("\npeer: skipped (needs 2 GPUs, found {})\n", n);
    return;
  }
  const std::size_t size = std::size_t{1} << 30;
  const int reps = 20;
  // Source: GPU 0 memory through pvmm, mapped with access for GPU 1 (and GPU 0).
  pvmm::allocation_properties props;
  auto src_mem = pvmm::physical_allocation::create(size, props).value();
  auto src_range = pvmm::address_reservation::reserve(size).value();
  void* src = src_range.map(0, src_mem, 0, size).value();
  check(src_range
            .set_access(0, size,
                        {{pvmm::location::device(0), pvmm::access::read_write},
                         {pvmm::location::device(1), pvmm::access::read_write}})
            .has_value(),
        "grant");
  void *dst = nullptr, *src_plain = nullptr;
  CUDART(cudaSetDevice(0));
  CUDART(cudaMalloc(&src_plain, size));
  CUDART(cudaSetDevice(1));
  CUDART(cudaMalloc(&dst, size));
  // cudaMemcpyPeer at its best: peer access enabled between the cudaMalloc contexts (pvmm needs none).
  if (cudaDeviceEnablePeerAccess(0, 0) != cudaSuccess) (void)cudaGetLastError();
  cudaStream_t stream;
  CUDART(cudaStreamCreate(&stream));
  auto bandwidth = [&](const std::function<void()>& copy) {
    copy();
    CUDART(cudaStreamSynchronize(stream));
    auto t0 = clock_type::now();
    for (int i = 0; i < reps; ++i) copy();
    CUDART(cudaStreamSynchronize(stream));
    return static_cast<double>(size) * reps / seconds_since(t0) / 1e9;
  };
  (void)bandwidth([&] { CUDART(cudaMemcpyPeerAsync(dst, 1, src_plain, 0, size, stream)); });  // warm both paths
  double through_mapping =
      bandwidth([&] { CUDART(cudaMemcpyAsync(dst, src, size, cudaMemcpyDeviceToDevice, stream)); });
  double memcpy_peer = bandwidth([&] { CUDART(cudaMemcpyPeerAsync(dst, 1, src_plain, 0, size, stream)); });
  fmt::print("\npeer: 1 GiB copies into GPU 1 from GPU 0 memory, {} reps (target >= 0.97x)\n", reps);
  fmt::print("  {:<52} {:>11} {:>11} {:>9}\n", "", "pvmm GB/s", "peer GB/s", "ratio");
  fmt::print("  {:<52} {:>11.1f} {:>11.1f} {:>8.3f}x\n", "pvmm peer mapping vs cudaMemcpyPeer", through_mapping,
             memcpy_peer, through_mapping / memcpy_peer);
  CUDART(cudaStreamDestroy(stream));
  CUDART(cudaFree(dst));
  CUDART(cudaSetDevice(0));
  CUDART(cudaFree(src_plain));
}

}  // namespace bench
