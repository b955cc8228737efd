// team_ring: a ring all-gather with put-signal: each rank forwards one chunk per step into the next rank's slot and
// signals it, then waits for its predecessor's signal; after n - 1 steps every slot holds every rank's chunk. On every
// backend with signal kernels (host: host functions on its streams; cuda and hip on NVIDIA: the signal module).
//
// The window's slot holds n chunks, chunk c for rank c. At step k rank r copies chunk (r - k) mod n from its own slot
// into the same place in rank r + 1's slot (a copy through the mapping, on the stream), then put_signal(r + 1): the
// signal is ordered after the copy, so rank r + 1's wait_signal(r) sees the chunk, which it forwards at step k + 1.
// Each place in a slot is written once, so no step needs an acknowledgement; every wait is bounded (a dead
// predecessor makes it expire, and signal_status() names it).
//
//   pvmm_example_team_ring --threads 4 | --spawn 4;   mpirun -np 4 pvmm_example_team_ring_mpi --mpi
// Rank 0 prints one line; a wrong chunk (or a failed call) prints FAIL and exits nonzero.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include <pvmm/pvmm.hpp>
#include <pvmm/team.hpp>

#include "team_launch.hpp"

namespace {

constexpr const char* name = "team_ring";
constexpr std::size_t chunk_words = std::size_t{1} << 14;
constexpr std::size_t chunk_bytes = chunk_words * sizeof(std::uint64_t);
constexpr std::chrono::seconds wait_timeout{10};

int fail(int rank, const char* what, const pvmm::error& e) {
  std::printf("%s: rank %d: FAIL: %s: %s\n", name, rank, what, e.message().c_str());
  return 1;
}

std::uint64_t word(int rank, std::size_t i) { return (static_cast<std::uint64_t>(rank) << 32) | i; }

char* chunk(void* slot, int c) { return static_cast<char*>(slot) + static_cast<std::size_t>(c) * chunk_bytes; }

int run(std::shared_ptr<pvmm::bootstrap> ranks) {
  const int me = ranks->rank(), n = ranks->size(), next = (me + 1) % n, prev = (me + n - 1) % n;
  auto team = pvmm::team::create(ranks, team_example::options_for(*ranks)).value();
  pvmm::window_options wo;
  wo.size = static_cast<std::size_t>(n) * chunk_bytes;
  wo.signal_channels = 1;
  wo.timeout = team_example::collective_timeout;
  auto window = pvmm::symmetric_window::create(team, wo).value();
  auto stream = pvmm::stream::create(team.device()).value();
  std::vector<std::uint64_t> mine(chunk_words);
  for (std::size_t i = 0; i < chunk_words; ++i) mine[i] = word(me, i);
  if (auto s = stream.copy_async(chunk(window.local(), me), mine.data(), chunk_bytes); !s)
    return fail(me, "own chunk", s.error());
  for (int step = 0; step + 1 < n; ++step) {
    const int forwarded = (me - step + n) % n;
    if (auto s = stream.copy_async(chunk(window.peer(next), forwarded), chunk(window.local(), forwarded), chunk_bytes);
        !s)
      return fail(me, "forward", s.error());
    if (auto s = window.put_signal(next, 0, stream); !s) {
      if (s.code() != pvmm::errc::not_supported) return fail(me, "put_signal", s.error());
      if (me == 0) std::printf("%s: [pvmm-skip] %s\n", name, s.error().message().c_str());
      return 0;
    }
    if (auto s = window.wait_signal(prev, 0, stream, wait_timeout); !s) {
      // Refused on every rank alike (thread ranks sharing a GPU): let this rank's signal finish, then stop.
      if (s.code() != pvmm::errc::not_supported || !stream.synchronize()) return fail(me, "wait_signal", s.error());
      if (me == 0) std::printf("%s: [pvmm-skip] %s\n", name, s.error().message().c_str());
      return 0;
    }
  }
  std::vector<std::uint64_t> gathered(static_cast<std::size_t>(n) * chunk_words);
  if (auto s = stream.copy_async(gathered.data(), window.local(), gathered.size() * 8); !s)
    return fail(me, "read back", s.error());
  if (auto s = stream.synchronize(); !s) return fail(me, "synchronize", s.error());
  if (auto s = window.signal_status(); !s) return fail(me, "a wait expired", s.error());
  for (int c = 0; c < n; ++c)
    for (std::size_t i = 0; i < chunk_words; ++i)
      if (gathered[static_cast<std::size_t>(c) * chunk_words + i] != word(c, i)) {
        std::printf("%s: rank %d: FAIL: chunk %d word %zu is %llx\n", name, me, c, i,
                    static_cast<unsigned long long>(gathered[static_cast<std::size_t>(c) * chunk_words + i]));
        return 1;
      }
  if (me == 0) std::printf("%s: %d ranks: ring all-gather with put-signal in %d steps: ok\n", name, n, n - 1);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return team_example::launch(name, argc, argv, run); }
