// pvmm-bench teams: how long a symmetric window takes to make, for N = 2, 4, 8 ranks and slots of 2 MiB, 64 MiB
// and 1 GiB, with the ranks as threads of this process and as endpoint processes (this program again, started
// with --teams-rank). Per repetition, every rank times (each step starting from a barrier, the slowest rank
// counted):
//   team      team::create: one allgather of member records, the agreement check, the team's listener;
//   exchange  a bare bootstrap allgather of one window step's record (256 bytes): the exchange's share;
//   window    symmetric_window::create: reserve, allocate, the record allgather, the fd ring, import, map, grant;
// and the fds each rank's process holds more while its team and window are alive, and after releasing them (0:
// nothing leaked). Printed: the median over the repetitions and its interquartile range.
// Ranks run one per GPU where the machine has N GPUs that reach each other, else all on device 0 (team_ranks.hpp).
// --compare torch adds PyTorch SymmetricMemory's symm_mem.empty + rendezvous at the same slots (team_torch.hpp: its
// own processes, one GPU each) as a row under each processes row.
// Then the section's other tables: team_sync.cpp (barrier and put/wait-signal latency) and team_allreduce.cpp
// (one-shot all-reduce); --quick (CI's smoke run) keeps N = 2, 4 and small sizes, every buffer still checked.
#include <dirent.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include <pvmm/pvmm.hpp>
#include <pvmm/team.hpp>

#include "bench.hpp"
#include "team_allreduce.hpp"
#include "team_ranks.hpp"
#include "team_torch.hpp"

namespace bench {
namespace {

constexpr auto collective_timeout = team_timeout;

// One repetition on one rank.
struct sample {
  double team_s = 0, exchange_s = 0, window_s = 0;
  long fds_held = 0;    // fds more than before, with the team and window alive (this process)
  long fds_leaked = 0;  // fds more than before, after releasing them
};

// Counts this process's fds. Serialised: in the threads launch every rank counts at once, and each count's own
// directory fd would show in the others' counts.
long open_fds() {
  static std::mutex one_at_a_time;
  std::lock_guard<std::mutex> lock(one_at_a_time);
  long n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d)) ++n;
    ::closedir(d);
  }
  return n - 3;  // ".", ".." and the directory's own fd
}

// The steps of one repetition, on one rank. Every rank of a process must call it (threads count fds together).
sample one_repetition(const std::shared_ptr<pvmm::bootstrap>& ranks, std::size_t slot) {
  sample s;
  pvmm::team_options to;
  to.device = rank_device(ranks->local_rank(), ranks->size());
  to.timeout = collective_timeout;
  pvmm::window_options wo;
  wo.size = slot;
  wo.timeout = collective_timeout;
  sync_point(*ranks);
  const long before = open_fds();
  sync_point(*ranks);
  {
    auto t0 = clock_type::now();
    auto team = pvmm::team::create(ranks, to);
    s.team_s = seconds_since(t0);
    check(team.has_value(), "team::create");
    std::array<unsigned char, 256> mine{};
    std::vector<unsigned char> all(mine.size() * static_cast<std::size_t>(ranks->size()));
    sync_point(*ranks);
    t0 = clock_type::now();
    check(ranks->allgather(mine.data(), mine.size(), all.data(), pvmm::deadline_in(collective_timeout)).has_value(),
          "bootstrap allgather");
    s.exchange_s = seconds_since(t0);
    sync_point(*ranks);
    t0 = clock_type::now();
    auto window = pvmm::symmetric_window::create(*team, wo);
    s.window_s = seconds_since(t0);
    check(window.has_value(), "symmetric_window::create");
    sync_point(*ranks);  // every rank's window is alive in this process
    s.fds_held = open_fds() - before;
    sync_point(*ranks);
  }
  sync_point(*ranks);  // every rank released
  s.fds_leaked = open_fds() - before;
  return s;
}

std::string encode(const sample& s) {
  return fmt::format("{} {} {} {} {}\n", s.team_s, s.exchange_s, s.window_s, s.fds_held, s.fds_leaked);
}

// One configuration's samples: result[rep][rank].
using samples = std::vector<std::vector<sample>>;

samples run_threads(int n, std::size_t slot, int reps) {
  auto ranks = pvmm::make_thread_bootstraps(n);
  check(ranks.has_value(), "make_thread_bootstraps");
  samples out(reps, std::vector<sample>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      for (int rep = 0; rep < reps; ++rep) out[rep][r] = one_repetition((*ranks)[r], slot);
    });
  for (auto& t : threads) t.join();
  return out;
}

samples run_processes(int n, std::size_t slot, int reps) {
  const std::string text =
      run_rank_processes("create", n, {std::to_string(slot), std::to_string(reps)}, std::chrono::seconds(300));
  // Lines "rank rep team exchange window held leaked", one per rank and repetition.
  samples out(reps, std::vector<sample>(n));
  std::istringstream lines(text);
  int rank = 0, rep = 0;
  sample s;
  while (lines >> rank >> rep >> s.team_s >> s.exchange_s >> s.window_s >> s.fds_held >> s.fds_leaked)
    if (rank >= 0 && rank < n && rep >= 0 && rep < reps) out[rep][rank] = s;
  return out;
}

// The slowest rank of each repetition (a collective is done when its last rank is), then median and IQR.
struct spread {
  double median = 0, q1 = 0, q3 = 0;
};
spread over_reps(const samples& all, double sample::*field) {
  std::vector<double> slowest;
  for (const auto& rep : all) {
    double worst = 0;
    for (const auto& s : rep) worst = std::max(worst, s.*field);
    slowest.push_back(worst);
  }
  return {bench::median(slowest), quantile(slowest, 0.25), quantile(slowest, 0.75)};
}

std::string ms(const spread& s) {
  return fmt::format("{:8.2f} [{:.2f}-{:.2f}]", s.median * 1e3, s.q1 * 1e3, s.q3 * 1e3);
}

// PyTorch SymmetricMemory's row (--compare torch): symm_mem.empty + rendezvous in the window::create column.
void print_torch_row(int n, std::size_t slot, const torch_results& torch) {
  const auto at = torch.create.find({n, slot});
  if (at == torch.create.end()) {
    const std::string why = torch.missing(n);
    fmt::print("  {:<9} {:>2} {:>6} MiB  [pvmm-skip] {}\n", "torch", n, slot >> 20,
               why.empty() ? "no result for this size" : why);
    return;
  }
  const std::vector<double>& v = at->second;
  fmt::print("  {:<9} {:>2} {:>6} MiB  {:<24} {:<24} {:<24} {:>5} {:>4}\n", "torch", n, slot >> 20, "-", "-",
             ms({bench::median(v), quantile(v, 0.25), quantile(v, 0.75)}), "-", "-");
}

void print_row(const char* launch, int n, std::size_t slot, const samples& all, bool one_process) {
  long held = 0, leaked = 0;
  for (const auto& rep : all)
    for (const auto& s : rep) held = std::max(held, s.fds_held), leaked = std::max(leaked, s.fds_leaked);
  // Threads share one process: its extra fds are every rank's together.
  const double held_per_rank = one_process ? static_cast<double>(held) / n : static_cast<double>(held);
  fmt::print("  {:<9} {:>2} {:>6} MiB  {:<24} {:<24} {:<24} {:>5.1f} {:>4}\n", launch, n, slot >> 20,
             ms(over_reps(all, &sample::team_s)), ms(over_reps(all, &sample::exchange_s)),
             ms(over_reps(all, &sample::window_s)), held_per_rank, leaked);
}

}  // namespace

int team_create_rank(const rank_args& a) {
  if (a.rest.size() != 2) return 2;
  const std::size_t slot = std::stoull(a.rest[0]);
  const int reps = std::stoi(a.rest[1]);
  auto ranks = join_ranks(a);
  for (int rep = 0; rep < reps; ++rep) emit(fmt::format("{} {} {}", a.rank, rep, encode(one_repetition(ranks, slot))));
  return 0;
}

void teams(const team_flags& flags) {
  // PVMM_BENCH_TEAMS=signals: the signals table alone (its time-shared rows are what issue 51 item 1 measures).
  if (const char* only = std::getenv("PVMM_BENCH_TEAMS"); only != nullptr && std::string(only) == "signals")
    return team_sync(flags);
  // A 1 GiB slot is committed at create: 3 repetitions keep the table under a minute. --quick: 2 MiB slots only.
  const int reps = flags.quick ? 2 : 7, reps_of_1_gib = 3;
  const std::size_t mib = std::size_t{1} << 20;
  const auto memory = pvmm::query_memory(0);
  const std::vector<int> sizes = team_sizes(flags);
  const std::vector<std::size_t> slots =
      flags.quick ? std::vector<std::size_t>{2 * mib} : std::vector<std::size_t>{2 * mib, 64 * mib, 1024 * mib};
  const auto reps_for = [&](std::size_t slot) { return slot >= 1024 * mib ? reps_of_1_gib : reps; };
  // PyTorch SymmetricMemory's run serves this table and the all-reduce's: one set of its processes per N.
  const bool with_torch = flags.compares("torch");
  torch_results torch;
  if (with_torch) {
    torch_plan create, reduce;
    for (std::size_t slot : slots) create.emplace_back(slot, reps_for(slot));
    for (std::size_t bytes : allreduce::sizes(flags.quick))
      reduce.emplace_back(bytes, allreduce::ops_for(bytes, flags.quick));
    torch = run_torch(sizes, create, reduce, allreduce::rounds(flags.quick));
  }
  fmt::print(
      "\nteams: symmetric window creation, ms: median [IQR] of {} repetitions ({} for 1 GiB slots), the slowest rank "
      "of each; {}; exchange = a bare bootstrap allgather of 256 bytes; fds: held per rank with the window alive, "
      "and left after{}\n",
      reps, reps_of_1_gib, placement(sizes),
      with_torch ? "; torch = PyTorch SymmetricMemory's symm_mem.empty + rendezvous (its own processes, one GPU each, "
                   "after one uncounted repetition)" +
                       (torch.version.empty() ? "" : ", torch " + torch.version)
                 : "");
  fmt::print("  {:<9} {:>2} {:>10}  {:<24} {:<24} {:<24} {:>5} {:>4}\n", "launch", "N", "slot", "team::create",
             "exchange", "window::create", "fds", "left");
  for (const char* launch : {"threads", "processes"})
    for (int n : sizes)
      for (std::size_t slot : slots) {
        // Every rank's slot is allocated at once; leave a quarter of the free memory to everything else.
        const std::size_t needed = slot * static_cast<std::size_t>(one_gpu_per_rank(n) ? 1 : n);
        if (!memory || needed > memory->free / 4 * 3) {
          fmt::print("  {:<9} {:>2} {:>6} MiB  skipped: {} ranks x {} MiB need {} MiB, {} MiB free here\n", launch, n,
                     slot >> 20, n, slot >> 20, needed >> 20, memory ? memory->free >> 20 : 0);
          continue;
        }
        const bool threads = std::string(launch) == "threads";
        const int k = reps_for(slot);
        print_row(launch, n, slot, threads ? run_threads(n, slot, k) : run_processes(n, slot, k), threads);
        if (!threads && with_torch) print_torch_row(n, slot, torch);
      }
  team_sync(flags);
  team_allreduce(flags, with_torch ? &torch : nullptr);
}

}  // namespace bench
