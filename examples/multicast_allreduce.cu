// multicast_allreduce: the NVLink SHARP flow of the CUDA guide through pvmm - create a multicast object, add
// every device, bind each device's memory, map the object, and reduce across devices with multimem PTX.
//
// It creates a multicast object, which can take shared GPU machines out of service: it refuses to run unless
// PVMM_ENABLE_MULTICAST_TESTS=1, and it is never run on the project's test machines.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <pvmm/pvmm.hpp>

__global__ void all_reduce(const float* multicast, float* out, std::size_t n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) {
    float sum;
    asm volatile("multimem.ld_reduce.relaxed.sys.global.add.f32 %0, [%1];" : "=f"(sum) : "l"(multicast + i) : "memory");
    out[i] = sum;
  }
#endif
}

int main() {
  const char* enabled = std::getenv("PVMM_ENABLE_MULTICAST_TESTS");
  if (!enabled || std::string(enabled) != "1") {
    std::printf(
        "multicast_allreduce: refused: it creates a multicast object; set PVMM_ENABLE_MULTICAST_TESTS=1 "
        "only on a machine you own\n");
    return 0;
  }
  try {
    const int devices = pvmm::device_count().value();
    for (int d = 0; d < devices; ++d)
      if (!pvmm::query_device(d).value().capabilities.multicast.supported) {
        std::printf("multicast_allreduce: device %d has no multicast\n", d);
        return 0;
      }
    pvmm::multicast_properties mp;
    mp.team_size = static_cast<unsigned>(devices);
    mp.size = pvmm::multicast_granularity(mp).value().recommended;
    auto mc = pvmm::multicast_object::create(mp).value();
    for (int d = 0; d < devices; ++d) mc.add_device(d).value();  // all devices before any binding

    const std::size_t n = mp.size / sizeof(float);
    std::vector<pvmm::physical_allocation> memory;
    std::vector<pvmm::address_reservation> unicast;
    for (int d = 0; d < devices; ++d) {
      pvmm::allocation_properties p;
      p.location = pvmm::location::device(d);
      memory.push_back(pvmm::physical_allocation::create(mp.size, p).value());
      mc.bind_memory(0, memory.back(), 0, mp.size).value();
      unicast.push_back(pvmm::address_reservation::reserve(mp.size).value());
      void* u =
          unicast.back().map_and_grant(0, memory.back(), 0, mp.size, {{p.location, pvmm::access::read_write}}).value();
      std::vector<float> ones(n, static_cast<float>(d + 1));
      cudaSetDevice(d);
      cudaMemcpy(u, ones.data(), mp.size, cudaMemcpyHostToDevice);
    }
    auto mc_range = pvmm::address_reservation::reserve(mp.size).value();
    mc_range.map(0, mc, 0, mp.size).value();
    std::vector<pvmm::access_descriptor> all;
    for (int d = 0; d < devices; ++d) all.push_back({pvmm::location::device(d), pvmm::access::read_write});
    mc_range.set_access(0, mp.size, all.data(), all.size()).value();

    cudaSetDevice(0);
    float* out = nullptr;
    cudaMalloc(&out, mp.size);
    all_reduce<<<static_cast<unsigned>((n + 255) / 256), 256>>>(mc_range.at<float>(0), out, n);
    std::vector<float> result(n);
    cudaMemcpy(result.data(), out, mp.size, cudaMemcpyDeviceToHost);
    cudaFree(out);
    const float expected = static_cast<float>(devices * (devices + 1) / 2);
    for (std::size_t i = 0; i < n; ++i)
      if (result[i] != expected) {
        std::printf("multicast_allreduce: FAIL at %zu: %f, expected %f\n", i, result[i], expected);
        return 1;
      }
    mc_range.unmap(0, mp.size).value();
    for (int d = 0; d < devices; ++d) mc.unbind(d, 0, mp.size).value();
    std::printf("multicast_allreduce: ok: %d devices reduced through one multicast address\n", devices);
    return 0;
  } catch (const pvmm::exception& e) {
    std::printf("multicast_allreduce: %s\n", e.what());
    return 1;
  }
}
