// pvmm-bench overhead: create / reserve / map / grant / unmap / release / free, pvmm against the raw calls
// (cuMem* on cuda; memfd + mmap on the host backend, which is what it does underneath).
#include <random>
#include <vector>

#include <fmt/format.h>

#include <pvmm/pvmm.hpp>

#include "bench.hpp"

#if !PVMM_BENCH_CUDA
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace bench {

struct op_times {
  std::vector<double> create, reserve, map, grant, unmap, release, free;
};

void overhead() {
  const int rounds = 41, per_round = 64;
  pvmm::allocation_properties props;
  const std::size_t size = pvmm::query_granularity(props).value().recommended;
  op_times p, r;
  auto time_pvmm = [&] {
    std::vector<pvmm::physical_allocation> mem(per_round);
    std::vector<pvmm::address_reservation> ranges(per_round);
    double t[7] = {};
    auto t0 = clock_type::now();
    for (auto& m : mem) m = pvmm::physical_allocation::create(size, props).value();
    t[0] = seconds_since(t0), t0 = clock_type::now();
    for (auto& x : ranges) x = pvmm::address_reservation::reserve(size).value();
    t[1] = seconds_since(t0), t0 = clock_type::now();
    for (int i = 0; i < per_round; ++i) check(ranges[i].map(0, mem[i], 0, size).has_value(), "map");
    t[2] = seconds_since(t0), t0 = clock_type::now();
    for (auto& x : ranges)
      check(x.set_access(0, size, {{pvmm::location::device(0), pvmm::access::read_write}}).has_value(), "grant");
    t[3] = seconds_since(t0), t0 = clock_type::now();
    for (auto& x : ranges) check(x.unmap(0, size).has_value(), "unmap");
    t[4] = seconds_since(t0), t0 = clock_type::now();
    for (auto& m : mem) check(m.release().has_value(), "release");
    t[5] = seconds_since(t0), t0 = clock_type::now();
    for (auto& x : ranges) check(x.release().has_value(), "free");
    t[6] = seconds_since(t0);
    p.create.push_back(t[0] / per_round), p.reserve.push_back(t[1] / per_round), p.map.push_back(t[2] / per_round);
    p.grant.push_back(t[3] / per_round), p.unmap.push_back(t[4] / per_round), p.release.push_back(t[5] / per_round);
    p.free.push_back(t[6] / per_round);
  };
  auto time_raw = [&] {
    double t[7] = {};
#if PVMM_BENCH_CUDA
    std::vector<CUmemGenericAllocationHandle> mem(per_round);
    std::vector<CUdeviceptr> ranges(per_round);
    const CUmemAllocationProp prop = raw_device_memory();
    const CUmemAccessDesc desc = raw_read_write();
    auto t0 = clock_type::now();
    for (auto& m : mem) CU(cuMemCreate(&m, size, &prop, 0));
    t[0] = seconds_since(t0), t0 = clock_type::now();
    for (auto& x : ranges) CU(cuMemAddressReserve(&x, size, 0, 0, 0));
    t[1] = seconds_since(t0), t0 = clock_type::now();
    for (int i = 0; i < per_round; ++i) CU(cuMemMap(ranges[i], size, 0, mem[i], 0));
    t[2] = seconds_since(t0), t0 = clock_type::now();
    for (auto& x : ranges) CU(cuMemSetAccess(x, size, &desc, 1));
    t[3] = seconds_since(t0), t0 = clock_type::now();
    for (auto& x : ranges) CU(cuMemUnmap(x, size));
    t[4] = seconds_since(t0), t0 = clock_type::now();
    for (auto& m : mem) CU(cuMemRelease(m));
    t[5] = seconds_since(t0), t0 = clock_type::now();
    for (auto& x : ranges) CU(cuMemAddressFree(x, size));
    t[6] = seconds_since(t0);
#else
    std::vector<int> mem(per_round);
    std::vector<void*> ranges(per_round);
    auto t0 = clock_type::now();
    for (auto& m : mem) {
      m = memfd_create("raw", MFD_CLOEXEC | MFD_ALLOW_SEALING);
      check(m >= 0 && ftruncate(m, static_cast<off_t>(size)) == 0, "memfd");
      check(fcntl(m, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0, "seal");
    }
    t[0] = seconds_since(t0), t0 = clock_type::now();
    for (auto& x : ranges) x = mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    t[1] = seconds_since(t0), t0 = clock_type::now();
    for (int i = 0; i < per_round; ++i)
      check(mmap(ranges[i], size, PROT_NONE, MAP_SHARED | MAP_FIXED, mem[i], 0) != MAP_FAILED, "map");
    t[2] = seconds_since(t0), t0 = clock_type::now();
    for (auto& x : ranges) check(mprotect(x, size, PROT_READ | PROT_WRITE) == 0, "mprotect");
    t[3] = seconds_since(t0), t0 = clock_type::now();
    for (auto& x : ranges)
      check(mmap(x, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) != MAP_FAILED,
            "unmap");
    t[4] = seconds_since(t0), t0 = clock_type::now();
    for (auto& m : mem) close(m);
    t[5] = seconds_since(t0), t0 = clock_type::now();
    for (auto& x : ranges) munmap(x, size);
    t[6] = seconds_since(t0);
#endif
    r.create.push_back(t[0] / per_round), r.reserve.push_back(t[1] / per_round), r.map.push_back(t[2] / per_round);
    r.grant.push_back(t[3] / per_round), r.unmap.push_back(t[4] / per_round), r.release.push_back(t[5] / per_round);
    r.free.push_back(t[6] / per_round);
  };
  time_pvmm(), time_raw();  // warm-up round, discarded
  p = {}, r = {};
  std::mt19937 order(2026);
  for (int i = 0; i < rounds; ++i) {
    if (order() & 1)
      time_pvmm(), time_raw();
    else
      time_raw(), time_pvmm();
  }
  fmt::print(
      "\noverhead: {} interleaved rounds x {} operations on {} chunks; median of per-round ratios "
      "(target <= 1.02x, or <= 30 ns added where the call takes under 1.5 us)\n",
      rounds, per_round, size >> 20 ? fmt::format("{} MiB", size >> 20) : fmt::format("{} KiB", size >> 10));
  table_header("pvmm us", "raw us");
  const char* raw_names[] =
#if PVMM_BENCH_CUDA
      {"cuMemCreate", "cuMemAddressReserve", "cuMemMap",        "cuMemSetAccess",
       "cuMemUnmap",  "cuMemRelease",        "cuMemAddressFree"};
#else
      {"memfd_create+ftruncate+seal",
       "mmap PROT_NONE",
       "mmap MAP_FIXED|MAP_SHARED",
       "mprotect",
       "mmap over (unmap)",
       "close",
       "munmap"};
#endif
  const char* names[] = {"create", "reserve", "map", "grant", "unmap", "release", "free"};
  std::vector<double>* pv[] = {&p.create, &p.reserve, &p.map, &p.grant, &p.unmap, &p.release, &p.free};
  std::vector<double>* rv[] = {&r.create, &r.reserve, &r.map, &r.grant, &r.unmap, &r.release, &r.free};
  std::vector<double> ptotal(rounds), rtotal(rounds);
  for (int i = 0; i < 7; ++i) {
    auto c = compare(*pv[i], *rv[i]);
    spread_row(fmt::format("{} vs {}", names[i], raw_names[i]), c);
    fmt::print("  {:<52} {:>+11.3f}\n", "  added per call, us (median of per-round differences)", [&] {
      std::vector<double> d;
      for (int k = 0; k < rounds; ++k) d.push_back(((*pv[i])[k] - (*rv[i])[k]) * 1e6);
      return median(d);
    }());
    for (int k = 0; k < rounds; ++k) ptotal[k] += (*pv[i])[k], rtotal[k] += (*rv[i])[k];
  }
  spread_row("whole lifecycle", compare(ptotal, rtotal));
}

}  // namespace bench
