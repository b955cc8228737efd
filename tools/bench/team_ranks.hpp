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

/// Starts `n` ranks of `job` with `args`; returns their stdout. Every rank must exit 0 within `limit`, or the
/// bench exits naming the job (ranks still running are killed first).
std::string run_rank_processes(const std::string& job, int n, const std::vector<std::string>& args,
                               std::chrono::seconds limit);

/// The rank's bootstrap (endpoint adapter) for `a`.
std::shared_ptr<pvmm::bootstrap> join_ranks(const rank_args& a);
/// A rank's team on device 0 (every rank on one device) and its window of `slot` bytes with `channels` signal
/// channels, every peer mapped (the bench stops naming the step otherwise). Members go in reverse order.
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

/// The same on every rank: whether round `round` of measurement `salt` times pvmm's side first (the sides
/// alternate in a seeded random order, as interleaved() does, so neither always runs warm).
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
void team_allreduce(const team_flags& flags);

}  // namespace bench
