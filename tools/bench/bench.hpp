// The measuring kit shared by pvmm-bench and pvmm-own-cost: clocks, medians, the interleaved-rounds comparison,
// the raw side's cuMem descriptors and the table rows.
// One section a file (overhead.cpp, growth.cpp, ...); main.cpp picks the sections to run.
#pragma once

#include <errno.h>  // program_invocation_short_name

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#if PVMM_BENCH_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>
#endif

namespace bench {

using clock_type = std::chrono::steady_clock;
inline double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

double median(std::vector<double> v);
double quantile(std::vector<double> v, double q);

/// Exits the bench with the failed call named: a benchmark that goes on after a failure measures nothing.
inline void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "%s: %s failed\n", program_invocation_short_name, what);
    std::exit(1);
  }
}

#if PVMM_BENCH_CUDA
#define CU(call) ::bench::check((call) == CUDA_SUCCESS, #call)
#define CUDART(call) ::bench::check((call) == cudaSuccess, #call)
#endif

#if PVMM_BENCH_CUDA
/// The raw side's properties: pinned memory on `device`, no handle types (what pvmm's defaults ask for).
inline CUmemAllocationProp raw_device_memory(int device = 0) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}
/// The raw side's grant: read-write for `device`.
inline CUmemAccessDesc raw_read_write(int device = 0) {
  CUmemAccessDesc desc{};
  desc.location = raw_device_memory(device).location;
  desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return desc;
}
#endif

/// pvmm against an alternative, measured in interleaved rounds.
struct comparison {
  double pvmm_s = 0, other_s = 0;    // medians of the per-round times
  double ratio = 0, q1 = 0, q3 = 0;  // median per-round ratio and its interquartile range
  bool within_noise() const { return q1 <= 1.0 && 1.0 <= q3; }
};

/// Summarises paired samples (one pvmm time and one alternative time per round).
comparison compare(const std::vector<double>& pvmm_s, const std::vector<double>& other_s);

/// Runs `rounds` rounds, each timing pvmm_op and other_op (each returns seconds per operation) in a random
/// order, after one uncounted warm-up round of each.
comparison interleaved(int rounds, const std::function<double()>& pvmm_op, const std::function<double()>& other_op);

/// Table rows. spread_row prints the median ratio with its IQR, and "within noise" where the IQR holds 1.
void table_header(const char* pvmm_unit, const char* other_unit);
void spread_row(const std::string& what, const comparison& c, double scale = 1e6);
void row(const std::string& what, double pvmm_s, double other_s, double scale = 1e6);

/// The teams sections' flags: --quick (the CI smoke run: N = 2 and 4, small sizes, few iterations; it still checks
/// every buffer), --compare <name> (an outside implementation beside pvmm and the raw calls: nccl, torch) and
/// --ranks=2,4 (only these team sizes).
struct team_flags {
  bool quick = false;
  std::vector<std::string> compare;
  std::vector<int> ranks;
  bool compares(const char* name) const { return std::find(compare.begin(), compare.end(), name) != compare.end(); }
};

// ---- sections ----
void overhead();
void sharing();
/// Window creation, barrier and put/wait-signal latency, one-shot all-reduce (team_ranks.hpp lists the files).
void teams(const team_flags& flags);
/// Allocation traces through every allocator (traces.cpp); sizes scaled by trace_scale, trace_rounds timed rounds.
void traces();
extern double trace_scale;
extern int trace_rounds;
extern std::string trace_only;  ///< replay only traces whose name holds this
extern int trace_slack;         ///< the caching allocator's slack_percent; -1: the library's default
extern int trace_chunk_mib;     ///< the caching allocator's chunk_size in MiB; 0: the library's default
/// pvmm::sleeping_allocator's sleep and wake against the bus, per policy (sleep.cpp).
void sleep_bench();
/// pvmm-bench sleep's first rows: page-locking `bytes` of fresh host memory three ways (bench/sleep_floor.cpp).
void sleep_floor(std::size_t bytes);
extern double sleep_gib;             ///< bytes slept and woken (--sleep-gib)
extern std::size_t sleep_block_mib;  ///< one allocation (--sleep-block-mib)
extern int sleep_cycles;             ///< sleep/wake cycles, the first reported apart (--sleep-cycles)
extern std::string sleep_policies;   ///< comma-separated policies (--sleep-policies: pinned,pageable,file,discard)
/// The child side of the teams sections: one endpoint rank of one job (team_ranks.hpp).
int teams_rank_main(int argc, char** argv);
#if PVMM_BENCH_CUDA
void growth();
void batching();
void peer();
void nccl();
void pools();
/// The release threshold on the default pool and a created one, pvmm against the raw pool calls.
void threshold();
void pinned();
void managed();
/// The child side of growth(): runs one variant in this fresh process and prints its result line.
int growth_variant_main(const std::string& which);
#endif

}  // namespace bench
