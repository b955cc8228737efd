// pvmm-own-cost: what pvmm itself adds to each driver call, measured against a null CUDA driver.
//
// The CUDA backend's driver table is swapped (install_driver_api) for the fake driver's (backends/cuda/fake),
// whose entries return at once, counting their calls. Each row times pvmm's operation and the same driver calls
// made straight through that table, in interleaved rounds (own_cost_measure.cpp), and prints the nanoseconds pvmm adds
// (median of per-round differences, with the IQR) and the driver calls each operation made. No GPU is needed, and no
// GPU timing noise hides a few nanoseconds: this is the number the "at most 30 ns added" target is about (pvmm-bench
// measures the same operations against the real driver, where these nanoseconds sit inside the driver's own time).
// Usage: pvmm-own-cost [operations per round] [only the rows whose name contains this] [rounds]
//        pvmm-own-cost --count [row]   (under callgrind: instructions per warm call, tools/cost-guard.py)
// (given rounds, the cold table is left out: for profiling one warm row under perf for as long as it takes)
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <pvmm/pvmm.hpp>

#include "own_cost.hpp"

using namespace own_cost;

namespace {
pvmm::cuda::driver_api null_driver() {
  pvmm::cuda::driver_api t = pvmm::cuda::fake::table(1);
  t.cuMulticastCreate = nullptr;  // never, not even against a fake driver
  return t;
}
}  // namespace

int main(int argc, char** argv) {
  // --lines [row]: the cold rows' calls marked for tools/own-cost-lines.sh (under valgrind's lackey), no timing.
  const bool lines = argc > 1 && std::string(argv[1]) == "--lines";
  if (lines) {
    if (!lines_marked()) {
      fmt::print(stderr,
                 "pvmm-own-cost --lines: run it under valgrind (tools/own-cost-lines.sh), built with its header\n");
      return 2;
    }
    mark_objects();
  }
  // --count [row]: instructions per warm call under callgrind (tools/cost-guard.py), no timing.
  const bool count = argc > 1 && std::string(argv[1]) == "--count";
  if (count && !counts_instructions()) {
    fmt::print(stderr, "pvmm-own-cost --count: run it under valgrind --tool=callgrind (tools/cost-guard.py)\n");
    return 2;
  }
  const std::string only = argc > 2 ? argv[2] : "";  // --lines [row] and [per round] [row] alike
  if (!lines && !count && argc > 1) per_round = std::max(1, std::atoi(argv[1]));
  if (!lines && argc > 3) rounds = std::max(1, std::atoi(argv[3]));
  const bool cold_table = argc <= 3;
  static const pvmm::cuda::driver_api table = null_driver();
  const pvmm::cuda::driver_api* const previous = pvmm::cuda::install_driver_api(&table);
  const auto& t = table;
  {
    const std::size_t size = std::size_t{2} << 20;
    const pvmm::allocation_properties props;
    const std::vector<pvmm::access_descriptor> grant{{pvmm::location::device(0), pvmm::access::read_write}};
    const CUmemAllocationProp prop = bench::raw_device_memory();
    const CUmemAccessDesc desc = bench::raw_read_write();
    // First use (capability and granularity caches) happens here, outside every measurement.
    bench::check(pvmm::query_device(0).has_value() && pvmm::query_granularity(props).has_value(), "first use");

    std::vector<pvmm::physical_allocation> mem;
    std::vector<pvmm::address_reservation> ranges;
    std::vector<CUmemGenericAllocationHandle> handles;
    std::vector<CUdeviceptr> addresses;
    // Set-up helpers, untimed.
    auto pvmm_setup = [&](int n, bool map) {
      mem.clear(), ranges.clear();
      for (int i = 0; i < n; ++i) {
        mem.push_back(pvmm::physical_allocation::create(size, props).value());
        ranges.push_back(pvmm::address_reservation::reserve(size).value());
        if (map) bench::check(ranges.back().map(0, mem.back(), 0, size).has_value(), "map");
      }
    };
    auto raw_setup = [&](int n) {
      handles.assign(static_cast<std::size_t>(n), 0), addresses.assign(static_cast<std::size_t>(n), 0);
      for (int i = 0; i < n; ++i) {
        t.cuMemCreate(&handles[i], size, &prop, 0);
        t.cuMemAddressReserve(&addresses[i], size, 0, 0, 0);
      }
    };

    std::vector<measured> ops;
    ops.push_back({"create + release",
                   [&](int n) {
                     mem.resize(static_cast<std::size_t>(n));
                     return timed([&] {
                       for (auto& m : mem) m = pvmm::physical_allocation::create(size, props).value();
                       for (auto& m : mem) bench::check(m.release().has_value(), "release");
                     });
                   },
                   [&](int n) {
                     handles.resize(static_cast<std::size_t>(n));
                     return timed([&] {
                       for (auto& h : handles) t.cuMemCreate(&h, size, &prop, 0);
                       for (auto& h : handles) t.cuMemRelease(h);
                     });
                   }});
    ops.push_back({"reserve + free",
                   [&](int n) {
                     ranges.resize(static_cast<std::size_t>(n));
                     return timed([&] {
                       for (auto& r : ranges) r = pvmm::address_reservation::reserve(size).value();
                       for (auto& r : ranges) bench::check(r.release().has_value(), "free");
                     });
                   },
                   [&](int n) {
                     addresses.resize(static_cast<std::size_t>(n));
                     return timed([&] {
                       for (auto& a : addresses) t.cuMemAddressReserve(&a, size, 0, 0, 0);
                       for (auto& a : addresses) t.cuMemAddressFree(a, size);
                     });
                   }});
    ops.push_back({"map + unmap",
                   [&](int n) {
                     pvmm_setup(n, false);
                     return timed([&] {
                       for (int i = 0; i < n; ++i) bench::check(ranges[i].map(0, mem[i], 0, size).has_value(), "map");
                       for (auto& r : ranges) bench::check(r.unmap(0, size).has_value(), "unmap");
                     });
                   },
                   [&](int n) {
                     raw_setup(n);
                     return timed([&] {
                       for (int i = 0; i < n; ++i) t.cuMemMap(addresses[i], size, 0, handles[i], 0);
                       for (auto a : addresses) t.cuMemUnmap(a, size);
                     });
                   }});
    ops.push_back({"set_access",
                   [&](int n) {
                     pvmm_setup(n, true);
                     return timed([&] {
                       for (auto& r : ranges) bench::check(r.set_access(0, size, grant).has_value(), "grant");
                     });
                   },
                   [&](int n) {
                     raw_setup(n);
                     return timed([&] {
                       for (auto a : addresses) t.cuMemSetAccess(a, size, &desc, 1);
                     });
                   }});
    ops.push_back({"lifecycle (all seven)",
                   [&](int n) {
                     mem.resize(static_cast<std::size_t>(n)), ranges.resize(static_cast<std::size_t>(n));
                     return timed([&] {
                       for (int i = 0; i < n; ++i) {
                         mem[i] = pvmm::physical_allocation::create(size, props).value();
                         ranges[i] = pvmm::address_reservation::reserve(size).value();
                         bench::check(ranges[i].map(0, mem[i], 0, size).has_value(), "map");
                         bench::check(ranges[i].set_access(0, size, grant).has_value(), "grant");
                         bench::check(ranges[i].unmap(0, size).has_value(), "unmap");
                         bench::check(mem[i].release().has_value(), "release");
                         bench::check(ranges[i].release().has_value(), "free");
                       }
                     });
                   },
                   [&](int n) {
                     return timed([&] {
                       for (int i = 0; i < n; ++i) {
                         CUmemGenericAllocationHandle h;
                         CUdeviceptr a;
                         t.cuMemCreate(&h, size, &prop, 0);
                         t.cuMemAddressReserve(&a, size, 0, 0, 0);
                         t.cuMemMap(a, size, 0, h, 0);
                         t.cuMemSetAccess(a, size, &desc, 1);
                         t.cuMemUnmap(a, size);
                         t.cuMemRelease(h);
                         t.cuMemAddressFree(a, size);
                       }
                     });
                   }});
    // One growth step of a growable_buffer with 2 MiB chunks against the hand-written create/map/grant step.
    ops.push_back({"growth step (2 MiB chunk)",
                   [&](int n) {
                     pvmm::growable_options o;
                     o.access = grant;
                     o.chunk_size = size;
                     o.reserve_size = size * static_cast<std::size_t>(n);
                     auto buffer = pvmm::growable_buffer::create(o).value();
                     return timed([&] {
                       for (int i = 1; i <= n; ++i) bench::check(buffer.resize(size * i).has_value(), "resize");
                     });
                   },
                   [&](int n) {
                     CUdeviceptr base;
                     t.cuMemAddressReserve(&base, size * static_cast<std::size_t>(n), 0, 0, 0);
                     handles.resize(static_cast<std::size_t>(n));
                     return timed([&] {
                       for (int i = 0; i < n; ++i) {
                         t.cuMemCreate(&handles[i], size, &prop, 0);
                         t.cuMemMap(base + size * i, size, 0, handles[i], 0);
                         t.cuMemSetAccess(base + size * i, size, &desc, 1);
                       }
                     });
                   }});
    auto s = pvmm::stream::create(0).value();
    auto pool = pvmm::memory_pool::create({}).value();
    const auto native_pool = reinterpret_cast<CUmemoryPool>(static_cast<std::uintptr_t>(pool.native_handle().value));
    const auto native_stream = reinterpret_cast<CUstream>(static_cast<std::uintptr_t>(s.native_handle().value));
    ops.push_back({"pool allocate + free",
                   [&](int n) {
                     return timed([&] {
                       for (int i = 0; i < n; ++i) {
                         void* p = pool.allocate_async(size, s).value();
                         bench::check(pool.free_async(p, s).has_value(), "free_async");
                       }
                     });
                   },
                   [&](int n) {
                     return timed([&] {
                       for (int i = 0; i < n; ++i) {
                         CUdeviceptr p;
                         t.cuMemAllocFromPoolAsync(&p, size, native_pool, native_stream);
                         t.cuMemFreeAsync(p, native_stream);
                       }
                     });
                   }});
    ops.push_back({"pinned allocate + free",
                   [&](int n) {
                     return timed([&] {
                       for (int i = 0; i < n; ++i)
                         bench::check(pvmm::pinned_allocation::create(size).has_value(), "pin");
                     });
                   },
                   [&](int n) {
                     return timed([&] {
                       for (int i = 0; i < n; ++i) {
                         void* p;
                         t.cuMemHostAlloc(&p, size, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
                         t.cuMemFreeHost(p);
                       }
                     });
                   }});
    // The caching allocator's warm path: a cached block taken and given back on its own stream, no driver call.
    auto cache = pvmm::caching_allocator::create({}).value();
    ops.push_back({"caching allocate + free",
                   [&](int n) {
                     return timed([&] {
                       for (int i = 0; i < n; ++i) {
                         void* p = cache.allocate(size / 2, s).value();
                         bench::check(cache.deallocate(p, s).has_value(), "deallocate");
                       }
                     });
                   },
                   [&](int) { return timed([] {}); }});  // the raw side: PyTorch's warm path calls no driver either
    // The pool pair again with five more size levels in the range registry (live 64 KiB..1 MiB allocations, as a
    // program allocating several sizes has): a raw free does not know its pointer's size. Last of the warm rows:
    // levels in use stay in use.
    std::vector<void*> smaller;
    const measured pool_pair =
        *std::find_if(ops.begin(), ops.end(), [](const measured& m) { return m.name == "pool allocate + free"; });
    ops.push_back({"pool pair, 6 levels in use",
                   [&, pvmm_pair = pool_pair.pvmm_op](int n) {
                     if (smaller.empty())
                       for (std::size_t k = 16; k <= 20; ++k)
                         smaller.push_back(pool.allocate_async(std::size_t{1} << k, s).value());
                     return pvmm_pair(n);
                   },
                   pool_pair.raw_op});

    if (count) {
      for (const auto& m : ops)
        if (m.name.find(only) != std::string::npos) count_warm(m);
    } else if (!lines) {
      fmt::print("pvmm-own-cost: pvmm against a null CUDA driver (entries return at once), {} rounds x {} operations\n",
                 rounds, per_round);
      fmt::print("  {:<26} {:>9} {:>9} {:>9}  {:<15}  {}\n", "operation", "pvmm ns", "raw ns", "added ns", "[IQR]",
                 "driver calls pvmm made for one");
      for (const auto& m : ops)
        if (m.name.find(only) != std::string::npos) report(m);
      if (only.empty()) report_lock_costs();
    }

    // The same calls one at a time with the caches evicted before each (what a real driver call leaves).
    auto none = [] {};
    auto pvmm_mapped = [&](int n) { pvmm_setup(n, true); };
    auto pvmm_unmapped = [&](int n) { pvmm_setup(n, false); };
    auto pvmm_reserved = [&](int n) {
      ranges.resize(static_cast<std::size_t>(n));
      for (auto& r : ranges) r = pvmm::address_reservation::reserve(size).value();
    };
    auto pvmm_unmap_all = [&] {
      for (auto& r : ranges) bench::check(r.unmap(0, size).has_value(), "unmap");
    };
    auto pvmm_free_all = [&] { ranges.clear(); };
    auto raw_reserved = [&](int n) {
      addresses.resize(static_cast<std::size_t>(n));
      for (auto& a : addresses) t.cuMemAddressReserve(&a, size, 0, 0, 0);
    };
    auto raw_mapped = [&](int n) {
      raw_setup(n);
      for (int i = 0; i < n; ++i) t.cuMemMap(addresses[i], size, 0, handles[i], 0);
    };
    auto raw_unmap_all = [&] {
      for (auto a : addresses) t.cuMemUnmap(a, size);
    };
    std::vector<measured_cold> cold;
    cold.push_back({"reserve", [&](int n) { ranges.resize(static_cast<std::size_t>(n)); },
                    [&](int i) { ranges[i] = pvmm::address_reservation::reserve(size).value(); }, pvmm_free_all,
                    [&](int n) { addresses.resize(static_cast<std::size_t>(n)); },
                    [&](int i) { t.cuMemAddressReserve(&addresses[i], size, 0, 0, 0); }, none});
    cold.push_back({"free", pvmm_reserved, [&](int i) { bench::check(ranges[i].release().has_value(), "free"); }, none,
                    raw_reserved, [&](int i) { t.cuMemAddressFree(addresses[i], size); }, none});
    cold.push_back({"map", pvmm_unmapped,
                    [&](int i) { bench::check(ranges[i].map(0, mem[i], 0, size).has_value(), "map"); }, pvmm_unmap_all,
                    raw_setup, [&](int i) { t.cuMemMap(addresses[i], size, 0, handles[i], 0); }, raw_unmap_all});
    cold.push_back({"unmap", pvmm_mapped, [&](int i) { bench::check(ranges[i].unmap(0, size).has_value(), "unmap"); },
                    none, raw_mapped, [&](int i) { t.cuMemUnmap(addresses[i], size); }, none});
    cold.push_back({"set_access", pvmm_mapped,
                    [&](int i) { bench::check(ranges[i].set_access(0, size, grant).has_value(), "grant"); },
                    pvmm_unmap_all, raw_mapped, [&](int i) { t.cuMemSetAccess(addresses[i], size, &desc, 1); },
                    raw_unmap_all});
    if (lines) {
      for (const auto& m : cold)
        if (m.name.find(only) != std::string::npos) mark_cold(m);
    } else if (cold_table && !count) {
      fmt::print("\ncold caches: each call alone, {} MiB streamed through before it (untimed), 31 rounds x 64 calls\n",
                 evicted_mib());
      fmt::print("  {:<26} {:>9} {:>9} {:>9}  {:<15}\n", "operation", "pvmm ns", "raw ns", "added ns", "[IQR]");
      for (const auto& m : cold)
        if (m.name.find(only) != std::string::npos || only.empty()) report_cold(m);
      fmt::print("after the same stream, median of 201 chains of 32 [IQR]:\n");
      report_miss_costs();
    }
    for (void* p : smaller) bench::check(pool.free_async(p, s).has_value(), "free_async");
    mem.clear(), ranges.clear();
  }
  pvmm::cuda::install_driver_api(previous);
  return 0;
}
