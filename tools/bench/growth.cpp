// pvmm-bench growth and batching (cuda): growing a buffer with growable_buffer against the hand-written
// cuMem loop (every step size, each run in a fresh process) and against cudaMalloc + copy; and what larger
// chunks save when a buffer grows in small steps.
#include <unistd.h>

#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include <pvmm/pvmm.hpp>

#include "bench.hpp"

namespace bench {
namespace {

std::size_t used_bytes(std::size_t baseline_free) {
  std::size_t free = 0, total = 0;
  CUDART(cudaMemGetInfo(&free, &total));
  return baseline_free > free ? baseline_free - free : 0;
}

// Each growth variant runs in a fresh process (this program, re-executed): in one process, whichever
// variant runs after multi-GiB releases pays for the driver reclaiming them, which no sleep reliably avoids.
struct growth_result {
  double seconds = 0;
  std::size_t peak = 0;
  double first_use = 0;  // the once-per-process first use (queries, one warm step), timed apart
};

/// The hand-written loop pvmm is measured against: reserve once, then a create + map + grant per step.
/// Returns the seconds it took; the reservation and handles are left for the caller to tear down.
double raw_cumem_growth(std::size_t target, std::size_t step, CUdeviceptr& base,
                        std::vector<CUmemGenericAllocationHandle>& handles) {
  const CUmemAllocationProp prop = raw_device_memory();
  const CUmemAccessDesc desc = raw_read_write();
  auto t0 = clock_type::now();
  CU(cuMemAddressReserve(&base, target, 0, 0, 0));
  for (std::size_t s = 0; s < target; s += step) {
    CUmemGenericAllocationHandle h;
    CU(cuMemCreate(&h, step, &prop, 0));
    CU(cuMemMap(base + s, step, 0, h, 0));
    CU(cuMemSetAccess(base + s, step, &desc, 1));
    handles.push_back(h);
  }
  return seconds_since(t0);
}

/// One growth variant, named "<pvmm|raw|malloc>[-peak] <step MiB> <target MiB>": grows a buffer to the target
/// in steps of the step size and returns the time the steps took (teardown follows, never measured). pvmm's
/// growable_buffer uses the step as its chunk size, so each step maps one chunk, as the raw loop does.
growth_result growth_variant(const std::string& which, std::size_t step, std::size_t target) {
  std::size_t free0 = 0, total = 0;
  CUDART(cudaMemGetInfo(&free0, &total));
  growth_result r;
  const bool sample = which.find("peak") != std::string::npos;
  if (which.rfind("pvmm", 0) == 0) {
    // First use, timed apart and alike on both sides: pvmm caches device capabilities and granularities, and
    // one growth step of the smallest chunk runs every driver entry and every pvmm code path the growth uses
    // once (the raw side does the same step by hand), so neither side's timed steps pay for first touches.
    auto w0 = clock_type::now();
    pvmm::allocation_properties props;
    check(pvmm::query_device(0).has_value() && pvmm::query_granularity(props).has_value(), "first use");
    {
      pvmm::growable_options warm;
      warm.access = {{pvmm::location::device(0), pvmm::access::read_write}};
      warm.chunk_size = warm.reserve_size = pvmm::query_granularity(props).value().minimum;
      auto b = pvmm::growable_buffer::create(warm).value();
      check(b.resize(warm.chunk_size).has_value(), "first use");
    }
    r.first_use = seconds_since(w0);
    pvmm::growable_options o;
    o.access = {{pvmm::location::device(0), pvmm::access::read_write}};
    o.chunk_size = step;
    o.reserve_size = target;
    auto t0 = clock_type::now();
    auto buffer = pvmm::growable_buffer::create(o).value();
    r.seconds = seconds_since(t0);
    for (std::size_t s = step; s <= target; s += step) {
      auto r0 = clock_type::now();
      check(buffer.resize(s).has_value(), "resize");
      r.seconds += seconds_since(r0);
      if (sample) r.peak = std::max(r.peak, used_bytes(free0));  // untimed, and only in the peak runs
    }
  } else if (which == "raw") {
    // The raw side's first use, the same way: one step of the smallest chunk by hand, then its teardown.
    auto w0 = clock_type::now();
    {
      CUdeviceptr warm_base;
      std::vector<CUmemGenericAllocationHandle> warm_handles;
      std::size_t unit = 0;
      const CUmemAllocationProp prop = raw_device_memory();
      CU(cuMemGetAllocationGranularity(&unit, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
      (void)raw_cumem_growth(unit, unit, warm_base, warm_handles);
      CU(cuMemUnmap(warm_base, unit));
      for (auto h : warm_handles) CU(cuMemRelease(h));
      CU(cuMemAddressFree(warm_base, unit));
    }
    r.first_use = seconds_since(w0);
    CUdeviceptr base;
    std::vector<CUmemGenericAllocationHandle> handles;
    r.seconds = raw_cumem_growth(target, step, base, handles);
    CU(cuMemUnmap(base, target));  // teardown, untimed: done here so the next process finds the driver idle
    for (auto h : handles) CU(cuMemRelease(h));
    CU(cuMemAddressFree(base, target));
  } else {  // cudaMalloc(new) + copy + cudaFree(old)
    void* old = nullptr;
    std::size_t old_size = 0;
    for (std::size_t s = step; s <= target; s += step) {
      auto r0 = clock_type::now();
      void* fresh = nullptr;
      CUDART(cudaMalloc(&fresh, s));
      if (old) CUDART(cudaMemcpy(fresh, old, old_size, cudaMemcpyDeviceToDevice));
      CUDART(cudaDeviceSynchronize());
      r.seconds += seconds_since(r0);
      if (sample) r.peak = std::max(r.peak, used_bytes(free0));  // while old and new coexist
      r0 = clock_type::now();
      if (old) CUDART(cudaFree(old));
      r.seconds += seconds_since(r0);
      old = fresh, old_size = s;
    }
    CUDART(cudaFree(old));
  }
  return r;  // pvmm's buffer is torn down on the way out, untimed
}

}  // namespace

int growth_variant_main(const std::string& spec) {
  char which[32] = {};
  std::size_t step_mib = 0, target_mib = 0;
  if (std::sscanf(spec.c_str(), "%31s %zu %zu", which, &step_mib, &target_mib) != 3 || step_mib == 0) return 2;
  auto r = growth_variant(which, step_mib << 20, target_mib << 20);
  std::printf("%.9f %zu %.9f\n", r.seconds, r.peak, r.first_use);
  return 0;
}

namespace {

growth_result run_growth_variant(const std::string& which, std::size_t step_mib, std::size_t target_mib) {
  const std::string command =
      fmt::format("/proc/{}/exe --growth-variant '{} {} {}'", ::getpid(), which, step_mib, target_mib);
  growth_result r;
  if (std::FILE* p = ::popen(command.c_str(), "r")) {
    if (std::fscanf(p, "%lf %zu %lf", &r.seconds, &r.peak, &r.first_use) != 3) r.seconds = -1;
    ::pclose(p);
  }
  check(r.seconds >= 0, "growth variant process");
  return r;
}

/// pvmm against the raw loop at one step size: `rounds` pairs of fresh processes, in a random order.
comparison growth_pair(std::size_t step_mib, std::size_t target_mib, int rounds, std::mt19937& order,
                       const std::string& other, std::vector<double>* first_use = nullptr) {
  std::vector<double> pv, ov;
  for (int round = 0; round < rounds; ++round) {
    growth_result p, o;
    if (order() & 1) {
      p = run_growth_variant("pvmm", step_mib, target_mib), o = run_growth_variant(other, step_mib, target_mib);
    } else {
      o = run_growth_variant(other, step_mib, target_mib), p = run_growth_variant("pvmm", step_mib, target_mib);
    }
    pv.push_back(p.seconds), ov.push_back(o.seconds);
    if (first_use) first_use->push_back(p.first_use);
  }
  return compare(pv, ov);
}

}  // namespace

void growth() {
  std::mt19937 order(99);
  const int rounds = 11;
  const std::size_t target_mib = 2048;
  fmt::print(
      "\ngrowth: to {} MiB, one chunk mapped per step, each variant in a fresh process (first use excluded), "
      "{} interleaved pairs per step size (target <= 1.05x the raw cuMem loop)\n",
      target_mib, rounds);
  table_header("pvmm ms", "raw ms");
  std::vector<double> first_use;
  for (std::size_t step_mib : {2, 8, 32, 64, 128, 256}) {
    auto c = growth_pair(step_mib, target_mib, rounds, order, "raw", &first_use);
    spread_row(fmt::format("growable_buffer vs raw cuMem loop, {:>3} MiB steps", step_mib), c, 1e3);
    // The same pair in this process, alternating: no process start-up in the spread.
    auto same = interleaved(
        rounds, [&] { return growth_variant("pvmm", step_mib << 20, target_mib << 20).seconds; },
        [&] { return growth_variant("raw", step_mib << 20, target_mib << 20).seconds; });
    spread_row("  the same, alternating in one process", same, 1e3);
  }
  fmt::print(
      "  pvmm's first use in a process (capability and granularity queries, then one warm step of the smallest "
      "chunk; the raw side warms the same step by hand): {:.2f} ms, not in the table\n",
      median(first_use) * 1e3);

  const std::size_t big_step = 256, big_target = 8192;
  auto against_malloc = growth_pair(big_step, big_target, 3, order, "malloc");
  fmt::print(
      "\ngrowth to 8 GiB in 256 MiB steps against cudaMalloc(new) + copy + cudaFree(old), 3 pairs "
      "(target >= 50x faster)\n");
  table_header("pvmm ms", "other ms");
  spread_row("growable_buffer vs cudaMalloc+copy+cudaFree", against_malloc, 1e3);
  const std::size_t pvmm_peak = run_growth_variant("pvmm-peak", big_step, big_target).peak;
  const std::size_t malloc_peak = run_growth_variant("malloc-peak", big_step, big_target).peak;
  fmt::print(
      "  cudaMalloc+copy is {:.1f}x slower; peak device memory: pvmm {} MiB, cudaMalloc+copy {} MiB "
      "(final size + one chunk = {} MiB)\n",
      1.0 / against_malloc.ratio, pvmm_peak >> 20, malloc_peak >> 20, big_target + big_step);
}

namespace {
void settle() {
  CUDART(cudaDeviceSynchronize());
  std::this_thread::sleep_for(std::chrono::seconds(1));
}

}  // namespace

void batching() {
  const std::size_t step = std::size_t{2} << 20, target = std::size_t{2} << 30;
  std::vector<double> naive_runs;
  for (int round = 0; round < 3; ++round) {
    settle();
    CUdeviceptr base;
    std::vector<CUmemGenericAllocationHandle> handles;
    naive_runs.push_back(raw_cumem_growth(target, step, base, handles));
    CU(cuMemUnmap(base, target));
    for (auto h : handles) CU(cuMemRelease(h));
    CU(cuMemAddressFree(base, target));
  }
  const double naive_s = median(naive_runs);
  fmt::print(
      "\nbatching: to 2 GiB in 2 MiB steps; growable_buffer chunk size vs naive create/map/grant per step; "
      "median of 3, teardown excluded (target >= 5x faster)\n");
  fmt::print("  {:<52} {:>11} {:>11} {:>9}\n", "", "pvmm ms", "naive ms", "ratio");
  double best = 1e9;
  std::size_t best_chunk = 0;
  for (std::size_t chunk_mib : {2, 8, 32, 64, 128, 256}) {
    pvmm::growable_options o;
    o.access = {{pvmm::location::device(0), pvmm::access::read_write}};
    o.chunk_size = chunk_mib << 20;
    o.reserve_size = target;
    std::vector<double> runs;
    for (int round = 0; round < 3; ++round) {
      settle();
      auto t0 = clock_type::now();
      auto buffer = pvmm::growable_buffer::create(o).value();
      for (std::size_t s = step; s <= target; s += step) check(buffer.resize(s).has_value(), "resize");
      runs.push_back(seconds_since(t0));
    }
    double t = median(runs);
    row(fmt::format("growable_buffer, chunk {:>3} MiB", chunk_mib), t, naive_s, 1e3);
    if (t < best) best = t, best_chunk = chunk_mib;
  }
  fmt::print("  best: {} MiB chunks, {:.1f}x faster than naive\n", best_chunk, naive_s / best);
}

}  // namespace bench
