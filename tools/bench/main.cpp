// pvmm-bench: what pvmm costs against the raw API it wraps, measured in the same process and run.
// Every table prints pvmm's time, the alternative's, their ratio and its spread. Sections:
//   overhead  create / reserve / map / grant / unmap / release / free: pvmm against the raw calls
//   growth    (cuda) every step size from 2 to 256 MiB: growable_buffer vs the raw cuMem loop, each run in a
//             fresh process; 8 GiB vs cudaMalloc+copy+cudaFree
//   batching  (cuda) to 2 GiB in 2 MiB steps: growable_buffer chunk sizes vs the naive create/map/grant per step
//   peer      (cuda, 2 GPUs) copy into GPU 1 from GPU 0 memory through a pvmm peer mapping vs cudaMemcpyPeer
//   nccl      (cuda, built with NCCL) ncclMemAlloc/ncclMemFree vs pvmm doing the same, 2 MiB to 1 GiB
//   sharing   export -> send fd -> import -> map -> first read: pvmm vs the raw calls
//   teams     N = 2, 4, 8 ranks, one GPU each where there are N reachable GPUs, else all on device 0: symmetric
//             window creation (threads and endpoint processes, 2 MiB to 1 GiB slots: team::create, a bare
//             exchange, window::create; fds held per rank; no raw alternative: absolute times; PyTorch
//             SymmetricMemory's rendezvous with --compare torch); barrier and put/wait-signal latency, against
//             the same steps on the raw calls (cuda: cuStreamWriteValue32 / cuStreamWaitValue32); one-shot
//             all-reduce 4 KiB to 64 MiB through the window's device view, against the same kernel on cuIpc
//             pointers (cuda; host: pvmm's side only), NCCL and PyTorch SymmetricMemory with --compare, time and
//             bandwidth, every output checked. teams-sync and teams-allreduce run one of the last two tables alone
//   pinned    (cuda) pinned allocate vs cuMemHostAlloc, register vs cuMemHostRegister; a reused staging buffer
//             (allocate, copy H2D, free) through pvmm::pinned_pool vs cuMemHostAlloc/cuMemFreeHost each time vs a raw
//             host-located driver pool; H2D and D2H bandwidth, pinned vs pageable, 4 KiB to 1 GiB
//   managed   (cuda, built with a CUDA compiler) prefetch-then-kernel vs first-touch faults vs an explicit copy;
//             pvmm's prefetch vs cuMemPrefetchAsync
//   pools     (cuda) warm allocate+free on a stream vs cuMemAllocFromPoolAsync/cuMemFreeAsync, vs cuMemAlloc/cuMemFree,
//             and cold (threshold 0) vs warm (threshold max)
//   threshold (cuda) the release threshold (0, the working set, UINT64_MAX) on the default pool and a created pool:
//             us per alloc+free with a synchronize per cycle, reserved bytes after it; pvmm vs the raw pool calls
//   sleep     pvmm::sleeping_allocator's sleep and wake of --sleep-gib (8) GiB in --sleep-block-mib (128) MiB blocks,
//             per policy (--sleep-policies=pinned,pinned-kept,pinned-prepared,pageable; also file, discard;
//             pinned-kept reuses the page-locked memory of the last wake: keep_host_memory; pinned-prepared also
//             page-locks it before the first sleep: prepare_host_memory), --sleep-cycles (5) cycles, against
//             the bus (the same bytes through one pinned buffer, D2H and H2D on one stream): time and GiB/s of the
//             first cycle and the steady state, device memory given back asleep, every byte checked after each wake
//   traces    allocation traces (a transformer training step, lognormal sizes, with and without cross-stream frees;
//             a mixture-of-experts step, activation recomputation, an inference KV cache growing and shrinking)
//             through the raw driver pool, pvmm's pool, pvmm's caching_allocator, and PyTorch's and RMM's allocators
//             where built with them (RMM 26.x from its wheels: -DPVMM_RMM_ROOT, traces.cpp says how): us per
//             alloc+free (p50, p99), peak reserved / peak live.
//             --trace-scale=F scales every size, --trace-rounds=N the timed rounds, --trace-only=TEXT picks traces,
//             --trace-slack=P the caching allocator's slack_percent (default: the library's; 0 cuts cached blocks
//             on every miss, as before the slack), --trace-chunk=MiB its physical chunk (default: the library's,
//             the recommended granularity, at least 4 MiB)
// Ratios come from rounds that alternate pvmm and the alternative in a random order: the ratio printed is the
// median of the per-round ratios, with their interquartile range; "within noise" where it holds 1.
// pvmm's own nanoseconds per call, without the driver's time around them, come from pvmm-own-cost.
// Usage: pvmm-bench [section ...] [--quick] [--compare nccl|torch] [--ranks=2,4] [--trace-scale=F]
//                   [--trace-rounds=N] [--trace-only=TEXT] [--trace-slack=P] [--trace-chunk=MiB]
//                   (default: all sections that apply)
//   --quick    teams: N = 2 and 4, small sizes, few iterations, every buffer still checked (CI's smoke run)
//   --compare  teams: an outside implementation beside pvmm and raw ([pvmm-skip] where it cannot run): nccl
//              (ncclAllReduce in the all-reduce table), torch (PyTorch SymmetricMemory's rendezvous in the
//              creation table, its one_shot_all_reduce in the all-reduce table; tools/bench/torch_symm_mem.py)
//   --ranks    teams: only these team sizes (default 2, 4, 8; --quick 2, 4)
//   --trace-*  traces: scale of the sizes, timed rounds, only the traces whose name holds TEXT, caching slack and
//              chunk
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <pvmm/pvmm.hpp>

#include "bench.hpp"
#include "team_ranks.hpp"

namespace {

/// The value of a flag --name=N, an integer in [lo, hi]; -1 (after the usage error) otherwise.
long integer_flag(const std::string& flag, long lo, long hi) {
  const std::size_t at = flag.find('=') + 1;
  // strtol, not std::stoi: a bad value is a usage error, not an uncaught exception.
  char* end = nullptr;
  const long v = std::strtol(flag.c_str() + at, &end, 10);
  if (end == flag.c_str() + at || *end != '\0' || v < lo || v > hi) {
    std::fprintf(stderr, "pvmm-bench: %s wants %ld to %ld, got %s\n", flag.substr(0, at - 1).c_str(), lo, hi,
                 flag.c_str() + at);
    return -1;
  }
  return v;
}

/// The positive number after a flag's '=', or -1 (said on stderr) where it is not one.
double positive_flag(const std::string& flag) {
  const std::size_t at = flag.find('=') + 1;
  // strtod, not std::stod: a bad value is a usage error, not an uncaught exception.
  char* end = nullptr;
  const double v = std::strtod(flag.c_str() + at, &end);
  if (end == flag.c_str() + at || *end != '\0' || !(v > 0)) {
    std::fprintf(stderr, "pvmm-bench: %s wants a positive number, got %s\n", flag.substr(0, at - 1).c_str(),
                 flag.c_str() + at);
    return -1;
  }
  return v;
}

void header() {
  auto b = pvmm::query_backend();
  std::time_t now = std::time(nullptr);
  char date[64];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  fmt::print("pvmm-bench  backend={}  {}  {}\n", b.name, b.driver_version, date);
  int n = pvmm::device_count().value();
  for (int d = 0; d < n; ++d) fmt::print("  device {}: {}\n", d, pvmm::query_device(d).value().name);
}

}  // namespace

#if PVMM_BENCH_CUDA && !PVMM_BENCH_MANAGED
void bench::managed() {
  fmt::print("\nmanaged: [pvmm-skip] not built: no CUDA compiler at configure time (the section has a kernel)\n");
}
#endif

int main(int argc, char** argv) {
  auto b = pvmm::query_backend();
  if (!b.available || pvmm::device_count().value() == 0) {
    std::printf("pvmm-bench: no device here (%s)\n", b.unavailable_reason.c_str());
    return 0;
  }
  // A teams rank picks its own device (one GPU per rank where there are enough): before device 0 is touched.
  if (argc >= 2 && std::string(argv[1]) == "--teams-rank") return bench::teams_rank_main(argc, argv);
#if PVMM_BENCH_CUDA
  CUDART(cudaSetDevice(0));
  CUDART(cudaFree(nullptr));  // create the primary context pvmm also uses
  if (argc == 3 && std::string(argv[1]) == "--growth-variant") return bench::growth_variant_main(argv[2]);
#endif
  std::vector<std::string> sections;
  bench::team_flags team_flags;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      team_flags.quick = true;
    } else if (a == "--compare" && i + 1 < argc) {
      team_flags.compare.push_back(argv[++i]);
    } else if (a.rfind("--ranks=", 0) == 0) {
      // A comma-separated list of team sizes, each 2 to 8 and even (the signal table pairs ranks).
      const char* at = a.c_str() + 8;
      for (;;) {
        char* end = nullptr;
        const long n = std::strtol(at, &end, 10);
        if (end == at || n < 2 || n > 8 || n % 2 != 0 || (*end != ',' && *end != '\0')) {
          std::fprintf(stderr, "pvmm-bench: --ranks wants team sizes 2, 4, 6 or 8, comma-separated, got %s\n",
                       a.c_str() + 8);
          return 2;
        }
        team_flags.ranks.push_back(static_cast<int>(n));
        if (*end == '\0') break;
        at = end + 1;
      }
    } else if (a.rfind("--trace-scale=", 0) == 0) {
      bench::trace_scale = positive_flag(a);
      if (bench::trace_scale < 0) return 2;
    } else if (a.rfind("--trace-only=", 0) == 0) {
      bench::trace_only = a.substr(13);
    } else if (a.rfind("--trace-rounds=", 0) == 0) {
      const long rounds = integer_flag(a, 1, 1000);
      if (rounds < 0) return 2;
      bench::trace_rounds = static_cast<int>(rounds);
    } else if (a.rfind("--trace-slack=", 0) == 0) {
      const long slack = integer_flag(a, 0, 1000);
      if (slack < 0) return 2;
      bench::trace_slack = static_cast<int>(slack);
    } else if (a.rfind("--trace-chunk=", 0) == 0) {
      const long mib = integer_flag(a, 1, 1024);
      if (mib < 0) return 2;
      bench::trace_chunk_mib = static_cast<int>(mib);
    } else if (a.rfind("--sleep-gib=", 0) == 0) {
      bench::sleep_gib = positive_flag(a);
      if (bench::sleep_gib < 0) return 2;
    } else if (a.rfind("--sleep-block-mib=", 0) == 0) {
      const long mib = integer_flag(a, 1, 1 << 16);
      if (mib < 0) return 2;
      bench::sleep_block_mib = static_cast<std::size_t>(mib);
    } else if (a.rfind("--sleep-cycles=", 0) == 0) {
      const long n = integer_flag(a, 1, 100000);
      if (n < 0) return 2;
      bench::sleep_cycles = static_cast<int>(n);
    } else if (a.rfind("--sleep-policies=", 0) == 0) {
      bench::sleep_policies = a.substr(17);
    } else if (a.rfind("--", 0) == 0) {
      std::fprintf(stderr,
                   "pvmm-bench: unknown flag %s (--quick, --compare nccl|torch, --ranks=, --trace-scale=, "
                   "--trace-rounds=, --trace-only=, --trace-slack=, --trace-chunk=, --sleep-gib=, --sleep-block-mib=, "
                   "--sleep-cycles=, --sleep-policies=)\n",
                   a.c_str());
      return 2;
    } else {
      sections.push_back(a);
    }
  }
  auto want = [&](const char* s) {
    return sections.empty() || std::find(sections.begin(), sections.end(), s) != sections.end();
  };
  header();
  if (want("overhead")) bench::overhead();
#if PVMM_BENCH_CUDA
  if (want("growth")) bench::growth();
  if (want("batching")) bench::batching();
  if (want("peer")) bench::peer();
  if (want("nccl")) bench::nccl();
  if (want("pools")) bench::pools();
  if (want("threshold")) bench::threshold();
  if (want("pinned")) bench::pinned();
  if (want("managed")) bench::managed();
#endif
  if (want("sharing")) bench::sharing();
  if (want("teams")) {
    bench::teams(team_flags);
  } else {  // one of the teams tables alone
    if (want("teams-sync")) bench::team_sync(team_flags);
    if (want("teams-allreduce")) bench::team_allreduce(team_flags);
  }
  if (want("traces")) bench::traces();
  if (want("sleep")) bench::sleep_bench();
  return 0;
}
