// pvmm-bench threshold: (cuda) the release threshold's effect on the device's default pool and on a pvmm-created
// pool. A working set (8 blocks of 8 MiB) is allocated and freed on a stream, then the stream is synchronized (where
// the driver gives back what the pool holds beyond the threshold), 8 cycles a round; the threshold at 0 (the
// drivers' default), at the working set, and at UINT64_MAX (pvmm's default for pools it creates). pvmm
// (memory_pool::set_release_threshold, allocate_async / free_async, usage) against the raw calls
// (cuMemPoolSetAttribute(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD), cuMemAllocFromPoolAsync / cuMemFreeAsync,
// cuStreamSynchronize, cuMemPoolGetAttribute(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)) on the same pool, in interleaved
// rounds. The default pool's threshold is put back as it was at the end.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <pvmm/pvmm.hpp>

#include "bench.hpp"

namespace bench {

void threshold() {
  if (!pvmm::query_device(0).value().capabilities.pools.supported) {
    fmt::print("\nthreshold: [pvmm-skip] device 0 has no memory pools\n");
    return;
  }
  const int rounds = 21, cycles = 8, blocks = 8;
  const std::size_t block = std::size_t{8} << 20, working_set = block * blocks;
  auto s = pvmm::stream::create(0).value();
  auto native_stream = reinterpret_cast<CUstream>(static_cast<std::uintptr_t>(s.native_handle().value));
  auto default_pool = pvmm::memory_pool::default_pool(0).value();
  const std::uint64_t default_was = default_pool.attributes().value().release_threshold;
  auto created = pvmm::memory_pool::create({}).value();
  fmt::print(
      "\nthreshold: allocate {} x {} MiB on a stream, free them, synchronize; {} cycles a round, {} interleaved "
      "rounds. us per alloc+free (the synchronize included), reserved bytes after the synchronize (default pool's "
      "threshold was {:#x})\n",
      blocks, block >> 20, cycles, rounds, default_was);
  table_header("pvmm us", "raw us");
  struct pool_case {
    const char* name;
    const pvmm::memory_pool* pool;
  };
  const std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  for (const pool_case& c : {pool_case{"default pool", &default_pool}, pool_case{"created pool", &created}}) {
    const pvmm::memory_pool& pool = *c.pool;
    auto native_pool = reinterpret_cast<CUmemoryPool>(static_cast<std::uintptr_t>(pool.native_handle().value));
    for (std::uint64_t t : {std::uint64_t{0}, std::uint64_t{working_set}, max}) {
      const std::string label = t == 0 ? "0" : t == max ? "UINT64_MAX" : fmt::format("{} MiB", t >> 20);
      std::uint64_t pvmm_reserved = 0, raw_reserved = 0;
      std::vector<void*> held(blocks);
      auto pvmm_side = [&] {
        check(pool.set_release_threshold(t).has_value(), "set_release_threshold");
        auto t0 = clock_type::now();
        for (int k = 0; k < cycles; ++k) {
          for (auto& p : held) p = pool.allocate_async(block, s).value();
          for (void* p : held) check(pool.free_async(p, s).has_value(), "free_async");
          check(s.synchronize().has_value(), "synchronize");
        }
        const double per = seconds_since(t0) / (cycles * blocks);
        pvmm_reserved = pool.usage().value().reserved_current;
        return per;
      };
      auto raw_side = [&] {
        cuuint64_t v = t;
        CU(cuMemPoolSetAttribute(native_pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v));
        auto t0 = clock_type::now();
        for (int k = 0; k < cycles; ++k) {
          for (auto& p : held) {
            CUdeviceptr d = 0;
            CU(cuMemAllocFromPoolAsync(&d, block, native_pool, native_stream));
            p = reinterpret_cast<void*>(static_cast<std::uintptr_t>(d));
          }
          for (void* p : held)
            CU(cuMemFreeAsync(static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p)), native_stream));
          CU(cuStreamSynchronize(native_stream));
        }
        const double per = seconds_since(t0) / (cycles * blocks);
        cuuint64_t r = 0;
        CU(cuMemPoolGetAttribute(native_pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &r));
        raw_reserved = r;
        return per;
      };
      spread_row(fmt::format("{}, threshold {}", c.name, label), interleaved(rounds, pvmm_side, raw_side));
      fmt::print("  {:<52} reserved after sync: pvmm {} MiB, raw {} MiB\n", "", pvmm_reserved >> 20,
                 raw_reserved >> 20);
    }
    check(pool.trim_to(0).has_value(), "trim_to");
  }
  check(default_pool.set_release_threshold(default_was).has_value(), "restore the default pool's threshold");
}

}  // namespace bench
