// team_allgather: an allgather written directly against a symmetric window.
//
// Every rank fills its own slot of the window, the ranks meet at a barrier, and every rank then reads every
// peer's slot through the flat window (rank r's slot at base() + r * stride()) into one local buffer and checks
// it. The window's memory is device memory on a GPU, so bytes move with stream copies into page-locked host
// buffers; on the host backend the same code runs over plain CPU memory.
//
//   pvmm_example_team_allgather --threads 4      four ranks as threads of one process
//   pvmm_example_team_allgather --spawn 4        four processes meeting at a pvmm endpoint
//   mpirun -np 4 pvmm_example_team_allgather_mpi --mpi
// Rank 0 prints one line; a wrong answer (or a failed call) prints FAIL and exits nonzero.
#include <cstdint>
#include <cstdio>
#include <cstring>

#include <pvmm/pvmm.hpp>
#include <pvmm/team.hpp>

#include "team_launch.hpp"

namespace {

constexpr const char* name = "team_allgather";
constexpr std::size_t words_per_rank = std::size_t{1} << 18;  // 1 MiB of 32-bit words in each slot

// What rank `rank` writes at word `i`: different for every rank and word, so a misplaced byte shows.
std::uint32_t value(int rank, std::size_t i) {
  return static_cast<std::uint32_t>(rank) * 0x9e3779b9u + static_cast<std::uint32_t>(i);
}

int allgather(std::shared_ptr<pvmm::bootstrap> ranks) {
  const auto until = [] { return pvmm::deadline_in(team_example::collective_timeout); };
  const std::size_t bytes = words_per_rank * sizeof(std::uint32_t);

  // 1. The team (who is who), then the window: every rank contributes `bytes` and maps every peer's slot.
  auto team = pvmm::team::create(ranks, team_example::options_for(*ranks)).value();
  pvmm::window_options wo;
  wo.size = bytes;
  wo.timeout = team_example::collective_timeout;
  auto window = pvmm::symmetric_window::create(team, wo).value();
  const int me = window.rank(), n = window.size();
  for (int r = 0; r < n; ++r)
    if (!window.mapped(r)) {
      std::printf("%s: rank %d: FAIL: rank %d is not mapped here: %s\n", name, me, r,
                  window.unmapped_reason(r).c_str());
      return 1;
    }

  // 2. Fill the own slot: write the words into a page-locked buffer, copy it into the slot on a stream.
  auto stream = pvmm::stream::create(team.device()).value();
  auto mine = pvmm::pinned_allocation::create(bytes).value();
  auto* words = static_cast<std::uint32_t*>(mine.data());
  for (std::size_t i = 0; i < words_per_rank; ++i) words[i] = value(me, i);
  stream.copy_async(window.local(), mine.data(), bytes).value();
  stream.synchronize().value();  // the slot holds the data before this rank says so at the barrier

  // 3. Every slot is written once every rank has passed the barrier.
  ranks->barrier(until()).value();

  // 4. Gather: slot r of the flat window lands at r * bytes of the local buffer.
  auto all = pvmm::pinned_allocation::create(bytes * static_cast<std::size_t>(n)).value();
  auto* base = static_cast<unsigned char*>(window.base());
  for (int r = 0; r < n; ++r)
    stream.copy_async(static_cast<unsigned char*>(all.data()) + r * bytes, base + r * window.stride(), bytes).value();
  stream.synchronize().value();

  // 5. Check every word of every rank.
  const auto* gathered = static_cast<const std::uint32_t*>(all.data());
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < words_per_rank; ++i)
      if (gathered[r * words_per_rank + i] != value(r, i)) {
        std::printf("%s: rank %d: FAIL: word %zu of rank %d is %#x, expected %#x\n", name, me, i, r,
                    gathered[r * words_per_rank + i], value(r, i));
        return 1;
      }

  // 6. Teardown needs no barrier: releasing is local, and a peer's mapping keeps this rank's memory alive.
  if (me == 0)
    std::printf("%s: %d ranks gathered %zu KiB each through the flat window (stride %zu KiB): ok\n", name, n,
                bytes >> 10, window.stride() >> 10);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return team_example::launch(name, argc, argv, allgather); }
