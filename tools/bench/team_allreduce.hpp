// pvmm-bench teams, all-reduce: one side of the one-shot all-reduce as a rank runs it (team_allreduce.cpp runs
// the rounds, checks the outputs and prints; team_allreduce.cu has the GPU sides: pvmm, raw, and NCCL for
// --compare nccl). PyTorch SymmetricMemory runs from Python in its own processes (team_torch.hpp).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <pvmm/bootstrap.hpp>
#include <pvmm/team.hpp>

namespace bench::allreduce {

constexpr int max_ranks = 8;

/// What the table runs, the same for every side (and for PyTorch's run): sizes in bytes, all-reduces per timed
/// block, timed rounds.
std::vector<std::size_t> sizes(bool quick);
int ops_for(std::size_t bytes, bool quick);
int rounds(bool quick);

class reducer {
 public:
  virtual ~reducer() = default;
  /// This rank's input (at most the largest count) into the memory its peers read; returns once it is there.
  virtual void fill(const std::vector<float>& input) = 0;
  /// Enqueues one all-reduce (float sum) of the first `count` floats of every rank's input into this rank's output.
  virtual void enqueue(std::size_t count) = 0;
  /// Returns when everything enqueued has run (bounded: every barrier in it has a timeout).
  virtual void finish() = 0;
  /// Fills the output with NaN, so a reduce that did not run cannot pass the check.
  virtual void poison(std::size_t count) = 0;
  /// The output's first `count` floats (after finish).
  virtual std::vector<float> output(std::size_t count) = 0;
  /// Empty, or what expired (a barrier that timed out: a peer did not come).
  virtual std::string expired() = 0;
};

#if PVMM_BENCH_ALLREDUCE_GPU
/// Blocks a GPU all-reduce launches at most (the device's SM count): pvmm's window needs a signal channel each.
int gpu_max_blocks();
/// pvmm's side: the kernel over the window's device view (pvmm/team_device.hpp), one channel per block.
std::unique_ptr<reducer> gpu_pvmm_reducer(const pvmm::symmetric_window& window, std::size_t max_count);
/// The raw side: the same kernel over cuMemAlloc buffers shared with cuIpcGetMemHandle / cuIpcOpenMemHandle (the
/// handles exchanged over `ranks`), with its barrier flags written by hand.
std::unique_ptr<reducer> gpu_raw_reducer(pvmm::bootstrap& ranks, std::size_t max_count);
#if PVMM_BENCH_NCCL
/// NCCL's side: ncclAllReduce (float, sum, out of place) on its own stream, in a communicator made with
/// ncclCommInitRank (the unique id from rank 0 through `ranks`), NVLS and CollNet off: never a multicast object.
/// One GPU per rank only: NCCL refuses two ranks on one device.
std::unique_ptr<reducer> gpu_nccl_reducer(pvmm::bootstrap& ranks, std::size_t max_count);
#endif
#endif

}  // namespace bench::allreduce
