// pvmm-bench teams --compare torch: PyTorch SymmetricMemory beside pvmm. Torch runs from Python, so
// tools/bench/torch_symm_mem.py (its own N processes, one GPU each) does the work and prints result lines; this
// runs it as a child under a deadline (killed on expiry) and keeps, per repetition or round, the slowest rank, as
// the bench does for its own ranks. Its rounds are its own (another set of processes): not interleaved with
// pvmm's, so the tables compare medians.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "bench.hpp"

namespace bench {

/// What one size is run with: bytes, and repetitions (creation) or operations per round (all-reduce).
using torch_plan = std::vector<std::pair<std::size_t, int>>;

struct torch_results {
  std::string skipped;                   ///< non-empty: nothing ran, and why
  std::map<int, std::string> skipped_n;  ///< N -> why that team size did not run
  std::string version;
  /// (N, bytes) -> the slowest rank's seconds per repetition (symm_mem.empty + rendezvous) or per round (µs
  /// per one_shot_all_reduce, in seconds).
  std::map<std::pair<int, std::size_t>, std::vector<double>> create, allreduce;
  /// Why `n` has no rows ("" where it has them).
  std::string missing(int n) const;
};

/// Runs the script for `team_sizes` (those without one GPU per rank are skipped here, not started), window
/// creation for `create`, the one-shot all-reduce for `allreduce` with `rounds` rounds (either plan may be
/// empty). A wrong sum or a child past the deadline fails the bench, as the bench's own ranks do; torch, CUDA
/// or symm_mem missing or refusing is a [pvmm-skip] reason.
torch_results run_torch(const std::vector<int>& team_sizes, const torch_plan& create, const torch_plan& allreduce,
                        int rounds);

}  // namespace bench
