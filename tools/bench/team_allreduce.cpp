// pvmm-bench teams, all-reduce: a one-shot all-reduce (float sums) of 4 KiB to 64 MiB between N = 2, 4, 8 endpoint
// processes on device 0. Every rank's input is in its slot of a window; each rank reads every peer's slot through
// the window's device view (pvmm/team_device.hpp) between two barriers and writes the sum into its own output.
//   cuda: pvmm's side against the same kernel on raw driver pointers (team_allreduce.cu says what each is).
//   host: pvmm's side only (the view's functions run in host code; there is no raw driver to compare with): the
//         CI smoke run of the same steps, checked the same way.
// Per size: rounds of `ops` all-reduces enqueued back to back and then waited for, the sides alternating in a
// seeded order, ranks lined up at a bootstrap barrier before each block, each round counting its slowest rank.
// Printed: µs per all-reduce (median [IQR]), the ratio, and pvmm's bandwidth as NCCL's tests print it (algbw =
// bytes / time; busbw = algbw x 2(N-1)/N), so NCCL's numbers compare directly. After the rounds each side runs
// once more into a NaN-filled output, and every float of every rank's output is checked.
// All ranks share one GPU, by time-slicing between their contexts (no MPS): a barrier waits for the peers' kernels
// to be scheduled, so these are not multi-GPU numbers; both sides pay the same.
// --compare nccl|torch: an outside implementation beside the two; each prints [pvmm-skip] with its reason until it
// can run here (outside_sides below: one reducer each, added to the rank's job).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include <pvmm/pvmm.hpp>
#include <pvmm/team.hpp>
#include <pvmm/team_device.hpp>

#include "bench.hpp"
#include "team_allreduce.hpp"
#include "team_ranks.hpp"

namespace bench {
namespace {

using allreduce::reducer;

constexpr std::uint64_t host_barrier_timeout_ns = 10000000000ull;  // 10 s, as the GPU kernels'

std::vector<std::size_t> sizes(bool quick) {
  if (quick) return {4096, 65536};
  return {4096, 65536, std::size_t{1} << 20, std::size_t{16} << 20, std::size_t{64} << 20};
}
int ops_for(std::size_t bytes, bool quick) { return quick ? 2 : bytes >= (std::size_t{16} << 20) ? 5 : 10; }

// The host backend's side: the kernel's steps in host code over the view (its memory is host memory).
class host_reducer final : public reducer {
 public:
  host_reducer(const pvmm::symmetric_window& w, std::size_t max_count) : window_(w), out_(max_count) {
    auto v = w.view();
    check(v.has_value(), "symmetric_window::view");
    view_ = *v;
  }
  void fill(const std::vector<float>& input) override {
    std::memcpy(window_.local(), input.data(), input.size() * sizeof(float));
  }
  void enqueue(std::size_t count) override {
    if (!view_.barrier(0, host_barrier_timeout_ns)) expired_ = true;  // every input in place
    for (std::size_t i = 0; i < count; ++i) {
      float sum = 0;
      for (int r = 0; r < view_.size; ++r) sum += static_cast<const float*>(view_.peer(r))[i];
      out_[i] = sum;
    }
    if (!view_.barrier(0, host_barrier_timeout_ns)) expired_ = true;  // nobody reads my slot any more
  }
  void finish() override {}
  void poison(std::size_t count) override { std::fill_n(out_.begin(), count, std::nanf("")); }
  std::vector<float> output(std::size_t count) override { return {out_.begin(), out_.begin() + count}; }
  std::string expired() override {
    if (!expired_) return {};
    auto s = window_.signal_status();
    return "a barrier expired" + (s ? std::string() : ": " + s.error().message());
  }

 private:
  const pvmm::symmetric_window& window_;
  pvmm::window_view view_;
  std::vector<float> out_;
  bool expired_ = false;
};

// `ops` all-reduces of `count` floats, then finish; seconds per all-reduce.
double timed_block(pvmm::bootstrap& ranks, reducer& side, std::size_t count, int ops) {
  sync_point(ranks);
  const auto t0 = clock_type::now();
  for (int i = 0; i < ops; ++i) side.enqueue(count);
  side.finish();
  return seconds_since(t0) / ops;
}

// One more all-reduce into a NaN-filled output; every float must be the exact sum (small integers: exact).
bool checked(pvmm::bootstrap& ranks, reducer& side, std::size_t count, int me, int n, const char* which) {
  side.poison(count);
  side.finish();
  sync_point(ranks);
  side.enqueue(count);
  side.finish();
  if (const std::string e = side.expired(); !e.empty()) {
    std::fprintf(stderr, "pvmm-bench: FAIL: teams all-reduce rank %d, %s side: %s\n", me, which, e.c_str());
    return false;
  }
  const auto out = side.output(count);
  const float ranks_sum = static_cast<float>(n * (n + 1) / 2);
  for (std::size_t i = 0; i < count; ++i) {
    const float expected = ranks_sum * static_cast<float>(i % 97);
    if (out[i] != expected) {
      std::fprintf(stderr,
                   "pvmm-bench: FAIL: teams all-reduce rank %d, %s side, %zu floats: float %zu is %g, expected %g\n",
                   me, which, count, i, static_cast<double>(out[i]), static_cast<double>(expected));
      return false;
    }
  }
  return true;
}

// Outside implementations --compare names: why each cannot run here (none runs yet: each becomes a reducer).
struct outside_side {
  const char* name;
  std::string (*missing)(int ranks);
};
std::string one_gpu_per_rank(int ranks) {
  const int gpus = pvmm::device_count().value_or(0);
  if (gpus < ranks) return fmt::format("needs one GPU per rank ({} ranks, {} GPUs here)", ranks, gpus);
  return "not written yet: its reducer is the next step (team_allreduce.hpp)";
}
const outside_side outside_sides[] = {
    {"nccl",
     [](int ranks) -> std::string {
#if PVMM_BENCH_NCCL
       return "ncclAllReduce " + one_gpu_per_rank(ranks) + "; NCCL refuses two ranks on one GPU";
#else
       (void)ranks;
       return "not built with NCCL (tools/CMakeLists.txt looks for nccl.h and libnccl)";
#endif
     }},
    {"torch",
     [](int ranks) {
       return "PyTorch SymmetricMemory's one_shot_all_reduce " + one_gpu_per_rank(ranks) + "; it runs from Python";
     }},
};

}  // namespace

int team_allreduce_rank(const rank_args& a) {
  const bool quick = !a.rest.empty() && a.rest[0] == "1";
  const int n = a.size, me = a.rank;
  const auto all_sizes = sizes(quick);
  const std::size_t max_count = all_sizes.back() / sizeof(float);
#if PVMM_BENCH_ALLREDUCE_GPU
  const int channels = allreduce::gpu_max_blocks();  // one per block
#else
  const int channels = 1;
#endif
  auto joined = join_team(a, max_count * sizeof(float), channels);
  const auto& ranks = joined.ranks;
  const pvmm::symmetric_window* const window = &joined.window;
  std::unique_ptr<reducer> pvmm_side, raw_side;
#if PVMM_BENCH_ALLREDUCE_GPU
  pvmm_side = allreduce::gpu_pvmm_reducer(*window, max_count);
  raw_side = allreduce::gpu_raw_reducer(*ranks, max_count);
#else
  pvmm_side = std::make_unique<host_reducer>(*window, max_count);
#endif
  std::vector<float> input(max_count);
  for (std::size_t i = 0; i < max_count; ++i) input[i] = static_cast<float>((me + 1) * static_cast<int>(i % 97));
  pvmm_side->fill(input);
  if (raw_side) raw_side->fill(input);

  bool ok = true;
  const int rounds = quick ? 2 : 7;
  for (std::size_t s = 0; s < all_sizes.size() && ok; ++s) {
    const std::size_t bytes = all_sizes[s], count = bytes / sizeof(float);
    const int ops = ops_for(bytes, quick);
    for (int round = -1; round < rounds; ++round) {  // round -1 warms both sides up, uncounted
      double pvmm_s = 0, raw_s = -1;
      const auto run_pvmm = [&] { pvmm_s = timed_block(*ranks, *pvmm_side, count, ops); };
      const auto run_raw = [&] {
        if (raw_side) raw_s = timed_block(*ranks, *raw_side, count, ops);
      };
      if (pvmm_first(round, static_cast<int>(s)))
        run_pvmm(), run_raw();
      else
        run_raw(), run_pvmm();
      if (round >= 0) emit(fmt::format("{} {} {} {} {}\n", bytes, me, round, pvmm_s, raw_s));
    }
    ok = checked(*ranks, *pvmm_side, count, me, n, "pvmm") &&
         (!raw_side || checked(*ranks, *raw_side, count, me, n, "raw"));
  }
  if (!ok) return 1;   // the peers' next barrier fails within its timeout: every rank exits
  sync_point(*ranks);  // no rank unmaps while a peer still reads
  raw_side.reset();    // collective: closes the peers' buffers, then frees its own after a barrier
  return 0;
}

void team_allreduce(const team_flags& flags) {
  const std::vector<int> team_sizes = flags.quick ? std::vector<int>{2, 4} : std::vector<int>{2, 4, 8};
  if (!flags.compare.empty()) fmt::print("\nteams, all-reduce, outside implementations (--compare):\n");
  for (const std::string& name : flags.compare) {
    const outside_side* side = nullptr;
    for (const auto& o : outside_sides)
      if (name == o.name) side = &o;
    if (side == nullptr) fmt::print("  {}: [pvmm-skip] unknown (nccl, torch)\n", name);
    for (int n : team_sizes)
      if (side != nullptr) fmt::print("  {} N={}: [pvmm-skip] {}\n", name, n, side->missing(n));
  }
#if PVMM_BENCH_CUDA && !PVMM_BENCH_ALLREDUCE_GPU
  fmt::print(
      "\nteams, all-reduce: [pvmm-skip] not built: no CUDA compiler at configure time (the section has a kernel)\n");
  return;
#else
  const bool quick = flags.quick;
  fmt::print(
      "\nteams, all-reduce: one-shot, float sums, N endpoint processes time-sharing device 0; µs per all-reduce, "
      "median [IQR] of {} rounds (the slowest rank of each); raw = {}; GB/s: pvmm's algbw / busbw (NCCL's)\n",
      quick ? 2 : 7,
#if PVMM_BENCH_CUDA
      "the same kernel on cuMemAlloc + cuIpc pointers, hand-written flags"
#else
      "none on the host backend"
#endif
  );
  fmt::print("  {:>2} {:>9}  {:<26} {:<26} {:<24} {}\n", "N", "size", "pvmm", "raw", "pvmm/raw [IQR]", "algbw / busbw");
  for (int n : team_sizes) {
    const auto rows =
        slowest_per_round(run_rank_processes("allreduce", n, {quick ? "1" : "0"}, std::chrono::seconds(300)));
    for (std::size_t bytes : sizes(quick)) {
      const auto at = rows.find(std::to_string(bytes));
      check(at != rows.end(), "a teams all-reduce result");
      const double algbw = static_cast<double>(bytes) / median(at->second.pvmm) / 1e9;
      const std::string size =
          bytes >= (std::size_t{1} << 20) ? fmt::format("{} MiB", bytes >> 20) : fmt::format("{} KiB", bytes >> 10);
      fmt::print("  {:>2} {:>9}  {}  {:.2f} / {:.2f}\n", n, size, latency_columns(at->second, 1e6), algbw,
                 algbw * 2 * (n - 1) / n);
    }
  }
#endif
}

}  // namespace bench
