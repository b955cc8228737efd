// pvmm-bench pinned: (cuda) pinned allocate against cuMemHostAlloc, register against cuMemHostRegister; a reused
// staging buffer (allocate, copy H2D on a stream, free; loop) through pvmm::pinned_pool against cuMemHostAlloc /
// cuMemFreeHost each time and against a raw host-located driver pool; H2D and D2H bandwidth through pvmm stream
// copies, pinned against pageable, 4 KiB to 1 GiB.
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <pvmm/pvmm.hpp>

#include "bench.hpp"

namespace bench {

namespace {

/// A reused staging buffer: allocate, copy H2D on a stream (the same raw cuMemcpyHtoDAsync everywhere), free; per
/// iteration, the synchronize at the end of each round included (what a staging loop costs per buffer, its copies
/// included). The host does not write the buffer: the copy is the use the allocators must wait for.
void staging() {
  const int rounds = 21;
  auto s = pvmm::stream::create(0).value();
  auto native_stream = reinterpret_cast<CUstream>(static_cast<std::uintptr_t>(s.native_handle().value));
  const bool host_pools = pvmm::query_device(0).value().capabilities.pools.host_location;
  auto pool = pvmm::pinned_pool::create().value();
  pvmm::pinned_pool_options cached_only;
  cached_only.driver_pool = false;
  auto cache = pvmm::pinned_pool::create(cached_only).value();
  CUmemoryPool raw_pool = nullptr;
  if (host_pools) {  // the raw side of pvmm's driver-pool source: host location, threshold max, device granted
    CUmemPoolProps props{};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_HOST;
    CU(cuMemPoolCreate(&raw_pool, &props));
    cuuint64_t keep = ~cuuint64_t{0};
    CU(cuMemPoolSetAttribute(raw_pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep));
    const CUmemAccessDesc grant = raw_read_write(0);
    CU(cuMemPoolSetAccess(raw_pool, &grant, 1));
  }
  fmt::print(
      "  staging buffer reused: allocate, copy H2D, free; us per iteration (round's synchronize included); "
      "pvmm::pinned_pool source: {}{}\n",
      pool.source() == pvmm::pinned_source::driver_pool ? "driver pool" : "pinned allocations",
      host_pools ? "" : " (no host memory pools on this driver: [pvmm-skip] raw host pool rows)");
  for (std::size_t size : {std::size_t{64} << 10, std::size_t{2} << 20}) {
    const std::string what =
        size >= (std::size_t{1} << 20) ? fmt::format("{} MiB", size >> 20) : fmt::format("{} KiB", size >> 10);
    CUdeviceptr device = 0;
    CU(cuMemAlloc(&device, size));
    auto through = [&](pvmm::pinned_pool& which, int n) {
      auto t0 = clock_type::now();
      for (int i = 0; i < n; ++i) {
        void* p = which.allocate(size).value();
        CU(cuMemcpyHtoDAsync(device, p, size, native_stream));
        check(which.deallocate(p, s).has_value(), "deallocate");
      }
      CU(cuStreamSynchronize(native_stream));
      return seconds_since(t0) / n;
    };
    const int per_round = 64, slow = 8;  // cuMemHostAlloc and cuMemFreeHost take milliseconds
    auto host_alloc = [&] {
      auto t0 = clock_type::now();
      for (int i = 0; i < slow; ++i) {
        void* p = nullptr;
        CU(cuMemHostAlloc(&p, size, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
        CU(cuMemcpyHtoDAsync(device, p, size, native_stream));
        CU(cuMemFreeHost(p));  // waits for the copy (an implicit synchronization)
      }
      CU(cuStreamSynchronize(native_stream));
      return seconds_since(t0) / slow;
    };
    auto against_host_alloc = interleaved(
        rounds, [&] { return through(pool, slow); }, host_alloc);
    spread_row("pinned_pool vs cuMemHostAlloc+cuMemFreeHost, " + what, against_host_alloc);
    fmt::print("  {:<52} {:.1f}x faster\n", "", 1.0 / against_host_alloc.ratio);
    if (host_pools) {
      auto raw = [&] {
        auto t0 = clock_type::now();
        for (int i = 0; i < per_round; ++i) {
          CUdeviceptr p = 0;
          CU(cuMemAllocFromPoolAsync(&p, size, raw_pool, native_stream));
          CU(cuMemcpyHtoDAsync(device, reinterpret_cast<void*>(static_cast<std::uintptr_t>(p)), size, native_stream));
          CU(cuMemFreeAsync(p, native_stream));
        }
        CU(cuStreamSynchronize(native_stream));
        return seconds_since(t0) / per_round;
      };
      spread_row("pinned_pool vs raw host pool (no event gate), " + what,
                 interleaved(
                     rounds, [&] { return through(pool, per_round); }, raw));
    }
    spread_row("pinned_pool: pinned allocations vs its default source, " + what,
               interleaved(
                   rounds, [&] { return through(cache, per_round); }, [&] { return through(pool, per_round); }));
    CU(cuMemFree(device));
  }
  const auto st = pool.stats();
  fmt::print("  pinned_pool: {} hits, {} new blocks, {} passed over (event pending), {} MiB held\n", st.cache_hits,
             st.new_blocks, st.passed_over, st.reserved >> 20);
  check(pool.release().has_value() && cache.release().has_value(), "pinned_pool release");
  if (raw_pool) CU(cuMemPoolDestroy(raw_pool));
}

}  // namespace

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
  staging();

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
