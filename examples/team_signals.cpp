// team_signals: a one-shot all-reduce ordered by the window's stream-ordered barrier (signal pads), on every
// backend with signal kernels (host: host functions on its streams; cuda: the embedded signal module).
//
// Every rank copies its input into its own slot on a stream, enqueues a barrier (bounded: a dead peer makes it
// expire, and signal_status() names it), then reads every peer's slot and sums, and enqueues a second barrier so no
// rank overwrites a slot a peer still reads. pvmm_example_team_oneshot (team_oneshot.cu) does the same inside one
// kernel with pvmm/team_device.hpp.
//
//   pvmm_example_team_signals --threads 4 | --spawn 4;   mpirun -np 4 pvmm_example_team_signals_mpi --mpi
// Rank 0 prints one line; a wrong sum (or a failed call) prints FAIL and exits nonzero.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include <pvmm/pvmm.hpp>
#include <pvmm/team.hpp>

#include "team_launch.hpp"

namespace {

constexpr const char* name = "team_signals";
constexpr std::size_t words = std::size_t{1} << 16;
constexpr std::chrono::seconds barrier_timeout{10};

int fail(int rank, const char* what, const pvmm::error& e) {
  std::printf("%s: rank %d: FAIL: %s: %s\n", name, rank, what, e.message().c_str());
  return 1;
}

int run(std::shared_ptr<pvmm::bootstrap> ranks) {
  const int me = ranks->rank();
  auto team = pvmm::team::create(ranks, team_example::options_for(*ranks)).value();
  pvmm::window_options wo;
  wo.size = words * sizeof(std::uint64_t);
  wo.signal_channels = 1;
  wo.timeout = team_example::collective_timeout;
  auto window = pvmm::symmetric_window::create(team, wo).value();
  auto stream = pvmm::stream::create(team.device()).value();
  const int n = window.size();
  std::vector<std::uint64_t> input(words), peer(words), sum(words, 0);
  for (std::size_t i = 0; i < words; ++i) input[i] = static_cast<std::uint64_t>(me + 1) * (i % 1000 + 1);
  if (auto s = stream.copy_async(window.local(), input.data(), words * 8); !s) return fail(me, "input", s.error());
  if (auto s = window.barrier(0, stream, barrier_timeout); !s) {
    if (s.code() != pvmm::errc::not_supported) return fail(me, "barrier", s.error());
    if (me == 0) std::printf("%s: [pvmm-skip] %s\n", name, s.error().message().c_str());
    return 0;
  }
  for (int r = 0; r < n; ++r) {
    if (auto s = stream.copy_async(peer.data(), window.peer(r), words * 8); !s) return fail(me, "read", s.error());
    if (auto s = stream.synchronize(); !s) return fail(me, "synchronize", s.error());
    for (std::size_t i = 0; i < words; ++i) sum[i] += peer[i];
  }
  if (auto s = window.barrier(0, stream, barrier_timeout); !s) return fail(me, "barrier", s.error());
  if (auto s = stream.synchronize(); !s) return fail(me, "synchronize", s.error());
  if (auto s = window.signal_status(); !s) return fail(me, "a barrier expired", s.error());
  const std::uint64_t ranks_sum = static_cast<std::uint64_t>(n) * (n + 1) / 2;
  for (std::size_t i = 0; i < words; ++i)
    if (sum[i] != ranks_sum * (i % 1000 + 1)) {
      std::printf("%s: rank %d: FAIL: word %zu is %llu\n", name, me, i, static_cast<unsigned long long>(sum[i]));
      return 1;
    }
  if (me == 0) std::printf("%s: %d ranks: one-shot all-reduce between stream-ordered barriers: ok\n", name, n);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return team_example::launch(name, argc, argv, run); }
