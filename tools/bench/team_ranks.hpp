// The teams sections' endpoint-process ranks: this program again, started as
//   pvmm-bench --teams-rank <job> <meeting point> <rank> <ranks> <job arguments...>
// one process per rank on one machine, meeting through make_endpoint_bootstrap. Each rank prints its results as
// lines on its stdout (each line written whole); the parent reads them all, with a deadline: a rank that hangs
// or dies is killed with the others and the bench stops naming the job (no wait here is unbounded).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <pvmm/bootstrap.hpp>
#include <pvmm/team.hpp>

#include "bench.hpp"

namespace bench {

/// Bounds every collective of a teams rank (team and window creation, bootstrap barriers, signal waits).
constexpr std::chrono::seconds team_timeout{30};

/// What a rank process is given after --teams-rank.
struct rank_args {
  std::string job, meeting;
  int rank = 0, size = 0;
  std::vector<std::string> rest;  // the job's own arguments
};

/// Where the ranks of an N-rank team run: one GPU each (rank r on device r) where this machine has at least N
/// devices and every pair of the first N can access each other (the window maps peers' memory; NCCL and PyTorch
/// SymmetricMemory need it too); otherwise every rank on device 0, time-sharing it. The same rule for every
/// teams table, threads and processes.
bool one_gpu_per_rank(int ranks);
int rank_device(int rank, int ranks);
/// The tables' header words for `team_sizes`: "N processes, one per GPU", "N processes time-sharing device 0", or
/// which N gets which.
std::string placement(const std::vector<int>& team_sizes);
/// The team sizes a table runs: --ranks where given, else 2, 4 (--quick) or 2, 4, 8.
std::vector<int> team_sizes(const team_flags& flags);

/// Children started by run_children: their stdout (every child's, as written), whether all closed it within the
/// limit (if not, those still running were killed by pid), and each one's wait status.
struct children_output {
  std::string text;
  bool in_time = false;
  std::vector<int> statuses;
  std::string not_started;  ///< non-empty: a child could not start (this program), and none runs
};
/// Starts one child per argv (argv[0] looked up in PATH when it has no '/'), reads their stdout until every one
/// closed it or `limit` passes, then reaps them all. Their stderr is this program's. Where one cannot start, those
/// already started are killed and reaped, and nothing is read.
children_output run_children(const std::vector<std::vector<std::string>>& argvs, std::chrono::seconds limit);

/// Starts `n` ranks of `job` with `args`; returns their stdout. Every rank must exit 0 within `limit`, or the
/// bench exits naming the job (ranks still running are killed first).
std::string run_rank_processes(const std::string& job, int n, const std::vector<std::string>& args,
                               std::chrono::seconds limit);

/// The rank's bootstrap (endpoint adapter) for `a`.
std::shared_ptr<pvmm::bootstrap> join_ranks(const rank_args& a);
/// A rank's team on rank_device (one GPU per rank, or all on device 0) and its window of `slot` bytes with `channels`
/// signal channels, every peer mapped (the bench stops naming the step otherwise). Members go in reverse order.
struct rank_team {
  std::shared_ptr<pvmm::bootstrap> ranks;
  pvmm::team team;
  pvmm::symmetric_window window;
};
rank_team join_team(const rank_args& a, std::size_t slot, int channels);
/// A bootstrap barrier, bounded by team_timeout: lines the ranks up before each timed block.
void sync_point(pvmm::bootstrap& ranks);
/// Writes one result line to stdout whole (under PIPE_BUF, so ranks' lines never interleave).
void emit(const std::string& line);

/// The same on every rank: the order in which round `round` of measurement `salt` runs its `sides` sides (a
/// seeded random permutation, as interleaved() does, so no side always runs warm); pvmm_first for two.
std::vector<int> side_order(int round, int salt, int sides);
bool pvmm_first(int round, int salt);

/// Result lines "<tag> <rank> <round> <pvmm seconds> <raw seconds>" from every rank, gathered per tag: each
/// round's slowest rank on each side (a collective is done when its last rank is). raw is negative where the
/// backend has no raw side.
struct paired_rounds {
  std::vector<double> pvmm, raw;
};
std::map<std::string, paired_rounds> slowest_per_round(const std::string& text);
/// One row's numbers: "pvmm median [IQR]   raw median [IQR]   ratio [IQR]", times scaled by `scale`.
std::string latency_columns(const paired_rounds& p, double scale);

// The jobs (one file each).
int team_create_rank(const rank_args& a);     // teams.cpp
int team_sync_rank(const rank_args& a);       // team_sync.cpp
int team_allreduce_rank(const rank_args& a);  // team_allreduce.cpp
void team_sync(const team_flags& flags);
struct torch_results;  // team_torch.hpp
/// `torch`: PyTorch SymmetricMemory's run (--compare torch), when teams() already made it; else the table runs
/// it itself where asked.
void team_allreduce(const team_flags& flags, const torch_results* torch = nullptr);

}  // namespace bench
