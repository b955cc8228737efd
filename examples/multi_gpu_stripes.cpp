// multi_gpu_stripes: the vectorAddMMAP flow. One reservation backed by chunks from every device in turn,
// one grant for the device that uses it, and data written and checked across all the stripes.
#include <algorithm>
#include <cstdio>
#include <vector>

#include <pvmm/pvmm.hpp>
#include <pvmm/testing.hpp>

int main() {
  auto backend = pvmm::query_backend();
  const int devices = backend.available ? pvmm::device_count().value() : 0;
  if (devices == 0) {
    std::printf("multi_gpu_stripes: no device (%s)\n", backend.unavailable_reason.c_str());
    return 0;
  }
  try {
    std::size_t chunk = 0;
    for (int d = 0; d < devices; ++d) {
      pvmm::allocation_properties p;
      p.location = pvmm::location::device(d);
      chunk = std::max(chunk, pvmm::query_granularity(p).value().recommended);
    }
    const int stripes = 4 * devices;
    auto range = pvmm::address_reservation::reserve(stripes * chunk).value();
    std::vector<pvmm::physical_allocation> memory;
    for (int s = 0; s < stripes; ++s) {
      pvmm::allocation_properties p;
      p.location = pvmm::location::device(s % devices);
      memory.push_back(pvmm::physical_allocation::create(p, chunk).value());
      range.map(s * chunk, memory.back(), 0, chunk).value();
    }
    // The range is used from device 0 only: only device 0 is granted (peer access per range, not global).
    range.set_access(0, stripes * chunk, {{pvmm::location::device(0), pvmm::access::read_write}}).value();
    std::vector<unsigned> out(stripes * chunk / sizeof(unsigned)), in(out.size());
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<unsigned>(i * 2654435761u);
    pvmm::testing::copy_to_mapping(range.address(), out.data(), stripes * chunk, 0).value();
    pvmm::testing::copy_from_mapping(in.data(), range.address(), stripes * chunk, 0).value();
    if (in != out) {
      std::printf("multi_gpu_stripes: FAIL: data differs\n");
      return 1;
    }
    for (int s = 0; s < stripes; ++s)
      if (memory[s].properties().value().location != pvmm::location::device(s % devices)) {
        std::printf("multi_gpu_stripes: FAIL: stripe %d is not on device %d\n", s, s % devices);
        return 1;
      }
    std::printf("multi_gpu_stripes: ok: %d stripes of %zu bytes from %d device(s), used from device 0\n", stripes,
                chunk, devices);
    return 0;
  } catch (const pvmm::exception& e) {
    std::printf("multi_gpu_stripes: %s\n", e.what());
    return 1;
  }
}
