// pvmm-bench pools: (cuda) warm allocate + free on a stream against cuMemAllocFromPoolAsync / cuMemFreeAsync and
// cuMemAlloc / cuMemFree; cold (threshold 0) against warm pools.
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <pvmm/pvmm.hpp>

#include "bench.hpp"

namespace bench {

void pools() {
  if (!pvmm::query_device(0).value().capabilities.pools.supported) {
    fmt::print("\npools: skipped (device 0 has no memory pools)\n");
    return;
  }
  const int rounds = 41, per_round = 256;
  auto s = pvmm::stream::create(0).value();
  auto native_stream = reinterpret_cast<CUstream>(static_cast<std::uintptr_t>(s.native_handle().value));
  auto pool = pvmm::memory_pool::create({}).value();  // threshold: keep everything (pvmm's default)
  auto native_pool = reinterpret_cast<CUmemoryPool>(static_cast<std::uintptr_t>(pool.native_handle().value));
  fmt::print(
      "\npools: warm allocate + free on one stream, {} per round, {} interleaved rounds (targets: <= 1.02x the "
      "raw pool calls; >= 20x faster than cuMemAlloc at 2 MiB)\n",
      per_round, rounds);
  table_header("pvmm us", "other us");
  for (std::size_t size : {std::size_t{2} << 20, std::size_t{128} << 20}) {
    const std::string mib = fmt::format("{} MiB", size >> 20);
    auto pvmm_pair = [&] {
      auto t0 = clock_type::now();
      for (int i = 0; i < per_round; ++i) {
        void* p = pool.allocate_async(size, s).value();
        check(pool.free_async(p, s).has_value(), "free_async");
      }
      const double t = seconds_since(t0) / per_round;
      check(s.synchronize().has_value(), "synchronize");
      return t;
    };
    auto raw_pair = [&] {
      auto t0 = clock_type::now();
      for (int i = 0; i < per_round; ++i) {
        CUdeviceptr p;
        CU(cuMemAllocFromPoolAsync(&p, size, native_pool, native_stream));
        CU(cuMemFreeAsync(p, native_stream));
      }
      const double t = seconds_since(t0) / per_round;
      CU(cuStreamSynchronize(native_stream));
      return t;
    };
    auto plain_pair = [&] {
      const int n = 16;  // cuMemAlloc is slow: fewer per round
      auto t0 = clock_type::now();
      for (int i = 0; i < n; ++i) {
        CUdeviceptr p;
        CU(cuMemAlloc(&p, size));
        CU(cuMemFree(p));
      }
      return seconds_since(t0) / n;
    };
    spread_row("pool vs cuMemAllocFromPoolAsync/FreeAsync, " + mib, interleaved(rounds, pvmm_pair, raw_pair));
    auto against_plain = interleaved(rounds, pvmm_pair, plain_pair);
    spread_row("pool vs cuMemAlloc/cuMemFree, " + mib, against_plain);
    fmt::print("  {:<52} {:.1f}x faster\n", "", 1.0 / against_plain.ratio);
  }
  // Cold: with threshold 0 every synchronize gives the memory back, so each allocation reserves it again.
  auto cold_pool = pvmm::memory_pool::create([] {
                     pvmm::pool_properties p;
                     p.release_threshold = 0;
                     return p;
                   }())
                       .value();
  fmt::print("  cold (threshold 0) vs warm (threshold max): allocate + free + synchronize, median of {} rounds\n",
             rounds);
  for (std::size_t size : {std::size_t{2} << 20, std::size_t{128} << 20}) {
    auto cycle = [&](const pvmm::memory_pool& which) {
      const int n = 16;
      auto t0 = clock_type::now();
      for (int i = 0; i < n; ++i) {
        void* p = which.allocate_async(size, s).value();
        check(which.free_async(p, s).has_value(), "free_async");
        check(s.synchronize().has_value(), "synchronize");
      }
      return seconds_since(t0) / n;
    };
    auto c = interleaved(
        rounds, [&] { return cycle(cold_pool); }, [&] { return cycle(pool); });
    spread_row(fmt::format("cold vs warm, {} MiB", size >> 20), c);
  }
}

}  // namespace bench
