// pinned_transfer: the training slides' page-locked memory point - copies from page-locked memory run at the bus's
// speed and asynchronously, pageable ones are staged - measured with pvmm's allocations and stream copies against
// device memory, both directions, on any backend. Checks the data; exits non-zero on a wrong answer.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include <pvmm/pvmm.hpp>

#include "common.hpp"

namespace {
using clock_type = std::chrono::steady_clock;

double gbps(std::size_t bytes, int reps, clock_type::time_point t0) {
  return static_cast<double>(bytes) * reps / std::chrono::duration<double>(clock_type::now() - t0).count() / 1e9;
}
}  // namespace

int main() {
  return example::run("pinned_transfer", [] {
    const std::size_t bytes = std::size_t{64} << 20;
    const int reps = 10;
    pvmm::allocation_properties props;
    const std::size_t g = pvmm::query_granularity(props).value().minimum;
    auto memory = pvmm::physical_allocation::create((bytes + g - 1) / g * g, props).value();
    auto range = pvmm::address_reservation::reserve(memory.size()).value();
    void* device = range.map_and_grant(0, memory, {{pvmm::location::device(0), pvmm::access::read_write}}).value();
    auto pinned = pvmm::pinned_allocation::create(bytes).value();
    std::vector<unsigned char> pageable(bytes);
    auto s = pvmm::stream::create(0).value();
    for (std::size_t i = 0; i < bytes; ++i) pageable[i] = static_cast<unsigned char>(i * 7);
    std::memcpy(pinned.data(), pageable.data(), bytes);

    auto measure = [&](void* to, const void* from) {
      s.copy_async(to, from, bytes).value();  // warm
      s.synchronize().value();
      auto t0 = clock_type::now();
      for (int r = 0; r < reps; ++r) s.copy_async(to, from, bytes).value();
      s.synchronize().value();
      return gbps(bytes, reps, t0);
    };
    const double h2d_pinned = measure(device, pinned.data()), h2d_pageable = measure(device, pageable.data());
    const double d2h_pinned = measure(pinned.data(), device), d2h_pageable = measure(pageable.data(), device);
    if (std::memcmp(pinned.data(), pageable.data(), bytes) != 0) {
      std::printf("pinned_transfer: FAIL: the data did not come back\n");
      return 1;
    }
    (void)range.unmap(0, memory.size());
    std::printf(
        "pinned_transfer: 64 MiB, GB/s: host->device pinned %.1f, pageable %.1f; device->host pinned %.1f, "
        "pageable %.1f: ok\n",
        h2d_pinned, h2d_pageable, d2h_pinned, d2h_pageable);
    return 0;
  });
}
