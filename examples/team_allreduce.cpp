// team_allreduce: a ring allreduce written directly against a symmetric window.
//
// Each rank's slot holds its whole vector, cut into N chunks. The ring runs in two phases of N - 1 steps, each
// step ended by the bootstrap's barrier (never a spin-wait on a flag another process writes):
// - reduce-scatter: at step s, rank q reads chunk (q - s - 1) mod N from its left neighbour's slot and adds it
//   into the same chunk of its own slot. After N - 1 steps rank q holds the full sum of chunk (q + 1) mod N.
// - allgather: at step s, rank q copies chunk (q - s) mod N, which its left neighbour has complete, from the
//   neighbour's slot into its own.
// At every step a rank writes a chunk of its own slot that its right neighbour is not reading in that step, and
// reads one its left neighbour finished before the last barrier, so one barrier per step is all the ordering.
// Slots are device memory on a GPU: chunks move with stream copies through page-locked host buffers and the
// adding happens on the host (the same code runs on the host backend).
//
//   pvmm_example_team_allreduce --threads 4 | --spawn 4;   mpirun -np 4 pvmm_example_team_allreduce_mpi --mpi
// Rank 0 prints one line; a wrong sum (or a failed call) prints FAIL and exits nonzero.
#include <cstdint>
#include <cstdio>

#include <pvmm/pvmm.hpp>
#include <pvmm/team.hpp>

#include "team_launch.hpp"

namespace {

constexpr const char* name = "team_allreduce";
constexpr std::size_t words_per_chunk = std::size_t{1} << 15;  // 256 KiB of 64-bit words per chunk

// Rank `rank`'s input at word `i`, and what every rank must hold at the end (integers: the sum is exact).
std::uint64_t input(int rank, std::size_t i) { return static_cast<std::uint64_t>(rank + 1) * (i % 1000 + 1); }
std::uint64_t expected(int n, std::size_t i) {
  return static_cast<std::uint64_t>(n) * static_cast<std::uint64_t>(n + 1) / 2 * (i % 1000 + 1);
}

int modulo(int a, int n) { return ((a % n) + n) % n; }

int allreduce(std::shared_ptr<pvmm::bootstrap> ranks) {
  const auto until = [] { return pvmm::deadline_in(team_example::collective_timeout); };
  const int n = ranks->size(), me = ranks->rank(), left = modulo(me - 1, n);
  const std::size_t chunk_bytes = words_per_chunk * sizeof(std::uint64_t);
  const std::size_t bytes = chunk_bytes * static_cast<std::size_t>(n);

  // The window: every rank's slot holds its N chunks; the left neighbour's slot must be mapped here.
  auto team = pvmm::team::create(ranks, team_example::options_for(*ranks)).value();
  pvmm::window_options wo;
  wo.size = bytes;
  wo.timeout = team_example::collective_timeout;
  auto window = pvmm::symmetric_window::create(team, wo).value();
  if (!window.mapped(left)) {
    std::printf("%s: rank %d: FAIL: left neighbour %d is not mapped: %s\n", name, me, left,
                window.unmapped_reason(left).c_str());
    return 1;
  }
  // Chunk c of rank r's slot, through the flat window.
  auto chunk = [&](int r, int c) {
    return static_cast<unsigned char*>(window.base()) + r * window.stride() + static_cast<std::size_t>(c) * chunk_bytes;
  };

  // This rank's input, copied into its slot.
  auto stream = pvmm::stream::create(team.device()).value();
  auto whole = pvmm::pinned_allocation::create(bytes).value();
  auto* words = static_cast<std::uint64_t*>(whole.data());
  for (std::size_t i = 0; i < words_per_chunk * static_cast<std::size_t>(n); ++i) words[i] = input(me, i);
  stream.copy_async(window.local(), whole.data(), bytes).value();
  stream.synchronize().value();
  ranks->barrier(until()).value();  // every slot holds its input

  // Reduce-scatter: own chunk += the left neighbour's, staged through two page-locked chunk buffers.
  auto own = pvmm::pinned_allocation::create(chunk_bytes).value();
  auto from_left = pvmm::pinned_allocation::create(chunk_bytes).value();
  auto* sum = static_cast<std::uint64_t*>(own.data());
  const auto* add = static_cast<const std::uint64_t*>(from_left.data());
  for (int step = 0; step < n - 1; ++step) {
    const int c = modulo(me - step - 1, n);
    stream.copy_async(own.data(), chunk(me, c), chunk_bytes).value();
    stream.copy_async(from_left.data(), chunk(left, c), chunk_bytes).value();
    stream.synchronize().value();
    for (std::size_t i = 0; i < words_per_chunk; ++i) sum[i] += add[i];
    stream.copy_async(chunk(me, c), own.data(), chunk_bytes).value();
    stream.synchronize().value();     // the sum is in the slot before the right neighbour may read it
    ranks->barrier(until()).value();  // every rank finished this step
  }

  // Allgather: take the chunk the left neighbour has complete (a copy between two slots of the window).
  for (int step = 0; step < n - 1; ++step) {
    const int c = modulo(me - step, n);
    stream.copy_async(chunk(me, c), chunk(left, c), chunk_bytes).value();
    stream.synchronize().value();
    ranks->barrier(until()).value();
  }

  // Check: the whole slot, read back, holds the sum of every rank's input.
  stream.copy_async(whole.data(), window.local(), bytes).value();
  stream.synchronize().value();
  for (std::size_t i = 0; i < words_per_chunk * static_cast<std::size_t>(n); ++i)
    if (words[i] != expected(n, i)) {
      std::printf("%s: rank %d: FAIL: word %zu is %llu, expected %llu\n", name, me, i,
                  static_cast<unsigned long long>(words[i]), static_cast<unsigned long long>(expected(n, i)));
      return 1;
    }
  if (me == 0)
    std::printf("%s: %d ranks summed %zu KiB each in a ring of %d + %d steps: ok\n", name, n, bytes >> 10, n - 1,
                n - 1);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return team_example::launch(name, argc, argv, allreduce); }
