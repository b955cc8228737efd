// pvmm-bench pinned: (cuda) pinned allocate against cuMemHostAlloc, register against cuMemHostRegister; H2D and D2H
// bandwidth through pvmm stream copies, pinned against pageable, 4 KiB to 1 GiB.
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <pvmm/pvmm.hpp>

#include "bench.hpp"

namespace bench {

void pinned() {
  const int rounds = 21, per_round = 16;
  const std::size_t size = std::size_t{2} << 20;
  fmt::print("\npinned: {} interleaved rounds of {} (target <= 1.02x the raw calls)\n", rounds, per_round);
  table_header("pvmm us", "raw us");
  auto pvmm_alloc = [&] {
    auto t0 = clock_type::now();
    for (int i = 0; i < per_round; ++i) check(pvmm::pinned_allocation::create(size).has_value(), "pinned");
    return seconds_since(t0) / per_round;
  };
  auto raw_alloc = [&] {
    auto t0 = clock_type::now();
    for (int i = 0; i < per_round; ++i) {
      void* p = nullptr;
      CU(cuMemHostAlloc(&p, size, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
      CU(cuMemFreeHost(p));
    }
    return seconds_since(t0) / per_round;
  };
  spread_row("pinned allocate+free vs cuMemHostAlloc, 2 MiB", interleaved(rounds, pvmm_alloc, raw_alloc));
  std::vector<unsigned char> host(size * per_round);
  auto pvmm_register = [&] {
    auto t0 = clock_type::now();
    for (int i = 0; i < per_round; ++i)
      check(pvmm::host_registration::create(host.data() + i * size, size).has_value(), "register");
    return seconds_since(t0) / per_round;
  };
  auto raw_register = [&] {
    auto t0 = clock_type::now();
    for (int i = 0; i < per_round; ++i) {
      CU(cuMemHostRegister(host.data() + i * size, size, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP));
      CU(cuMemHostUnregister(host.data() + i * size));
    }
    return seconds_since(t0) / per_round;
  };
  spread_row("register+unregister vs cuMemHostRegister, 2 MiB", interleaved(rounds, pvmm_register, raw_register));

  fmt::print("  bandwidth through pvmm's stream copies, GB/s (median of 5):\n");
  fmt::print("  {:<12} {:>10} {:>10} {:>10} {:>10}\n", "size", "H2D pin", "H2D page", "D2H pin", "D2H page");
  auto s = pvmm::stream::create(0).value();
  const std::size_t largest = std::size_t{1} << 30;
  CUdeviceptr device = 0;
  CU(cuMemAlloc(&device, largest));
  auto pinned_host = pvmm::pinned_allocation::create(largest).value();
  std::vector<unsigned char> pageable(largest, 1);
  void* d = reinterpret_cast<void*>(static_cast<std::uintptr_t>(device));
  for (std::size_t bytes = std::size_t{4} << 10; bytes <= largest; bytes *= 4) {
    const int reps = bytes >= (std::size_t{64} << 20) ? 3 : bytes >= (std::size_t{1} << 20) ? 20 : 100;
    auto bw = [&](void* to, const void* from) {
      std::vector<double> runs;
      for (int r = 0; r < 5; ++r) {
        check(s.synchronize().has_value(), "sync");
        auto t0 = clock_type::now();
        for (int i = 0; i < reps; ++i) check(s.copy_async(to, from, bytes).has_value(), "copy");
        check(s.synchronize().has_value(), "sync");
        runs.push_back(static_cast<double>(bytes) * reps / seconds_since(t0) / 1e9);
      }
      return median(runs);
    };
    fmt::print(
        "  {:<12} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.2f}\n",
        bytes >= (std::size_t{1} << 20) ? fmt::format("{} MiB", bytes >> 20) : fmt::format("{} KiB", bytes >> 10),
        bw(d, pinned_host.data()), bw(d, pageable.data()), bw(pinned_host.data(), d), bw(pageable.data(), d));
  }
  CU(cuMemFree(device));
}

}  // namespace bench
