// pvmm-bench teams, all-reduce: a one-shot all-reduce (float sums) of 4 KiB to 64 MiB between N = 2, 4, 8 endpoint
// processes, one GPU each where the machine has N GPUs that reach each other, else all on device 0 (team_ranks.hpp).
// Every rank's input is in its slot of a window; each rank reads every peer's slot through the window's device view
// (pvmm/team_device.hpp) between two barriers and writes the sum into its own output.
//   cuda: pvmm's side against the same kernel on raw driver pointers (team_allreduce.cu says what each is).
//   host: pvmm's side only (the view's functions run in host code; there is no raw driver to compare with): the
//         CI smoke run of the same steps, checked the same way.
// Per size: rounds of `ops` all-reduces enqueued back to back and then waited for, the sides in a seeded order,
// ranks lined up at a bootstrap barrier before each block, each round counting its slowest rank.
// Printed: µs per all-reduce (median [IQR]), the ratio, and pvmm's bandwidth as NCCL's tests print it (algbw =
// bytes / time; busbw = algbw x 2(N-1)/N), so NCCL's numbers compare directly. After the rounds each side runs
// once more into a NaN-filled output, and every float of every rank's output is checked.
// Where the ranks share one GPU, their contexts time-slice (no MPS): a barrier waits for the peers' kernels to be
// scheduled, so those are not multi-GPU numbers; every side pays the same.
// --compare nccl: ncclAllReduce as a third side of the same rounds (one GPU per rank only; NCCL refuses two ranks
// on one device), printed as pvmm against NCCL per round. --compare torch: PyTorch SymmetricMemory's
// one_shot_all_reduce, same sizes, operations and rounds in its own processes (team_torch.hpp): medians compared.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <pvmm/pvmm.hpp>
#include <pvmm/team.hpp>
#include <pvmm/team_device.hpp>

#include "bench.hpp"
#include "team_allreduce.hpp"
#include "team_ranks.hpp"
#include "team_torch.hpp"

namespace bench {
namespace allreduce {

std::vector<std::size_t> sizes(bool quick) {
  if (quick) return {4096, 65536};
  return {4096, 65536, std::size_t{1} << 20, std::size_t{16} << 20, std::size_t{64} << 20};
}
int ops_for(std::size_t bytes, bool quick) { return quick ? 2 : bytes >= (std::size_t{16} << 20) ? 5 : 10; }
int rounds(bool quick) { return quick ? 2 : 7; }

}  // namespace allreduce

namespace {

using allreduce::reducer;

constexpr std::uint64_t host_barrier_timeout_ns = 10000000000ull;  // 10 s, as the GPU kernels'

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

// Why NCCL cannot run beside pvmm for `ranks` ranks here ("" where it can).
std::string nccl_missing(int ranks) {
#if PVMM_BENCH_NCCL && PVMM_BENCH_ALLREDUCE_GPU
  if (one_gpu_per_rank(ranks)) return "";
  return fmt::format(
      "needs one GPU per rank, peers reachable ({} ranks, {} GPUs here); NCCL refuses two ranks on "
      "one GPU",
      ranks, pvmm::device_count().value_or(0));
#elif PVMM_BENCH_CUDA
  (void)ranks;
  return "not built with NCCL (tools/CMakeLists.txt looks for nccl.h and libnccl)";
#else
  (void)ranks;
  return "the host backend: NCCL runs on GPUs";
#endif
}

std::string size_name(std::size_t bytes) {
  return bytes >= (std::size_t{1} << 20) ? fmt::format("{} MiB", bytes >> 20) : fmt::format("{} KiB", bytes >> 10);
}

// µs median [IQR] of seconds, as latency_columns prints a side.
std::string us_cell(const std::vector<double>& v) {
  return fmt::format("{:9.2f} [{:.2f}-{:.2f}]", median(v) * 1e6, quantile(v, 0.25) * 1e6, quantile(v, 0.75) * 1e6);
}

std::string bandwidth(std::size_t bytes, double seconds, int n) {
  const double algbw = static_cast<double>(bytes) / seconds / 1e9;
  return fmt::format("{:.2f} / {:.2f}", algbw, algbw * 2 * (n - 1) / n);
}

// A row per size from the ranks' lines tagged `tag` + bytes: pvmm against the other side of those lines, per
// round, and a bandwidth: pvmm's against raw (tag ""), the outside side's otherwise (NCCL: "nccl-").
void print_paired_rows(int n, const std::map<std::string, paired_rounds>& rows, const std::string& tag, bool quick) {
  for (std::size_t bytes : allreduce::sizes(quick)) {
    const auto at = rows.find(tag + std::to_string(bytes));
    check(at != rows.end(), "a teams all-reduce result");
    const paired_rounds& p = at->second;
    fmt::print("  {:>2} {:>9}  {}  {}\n", n, size_name(bytes), latency_columns(p, 1e6),
               bandwidth(bytes, median(tag.empty() ? p.pvmm : p.raw), n));
  }
}

}  // namespace

int team_allreduce_rank(const rank_args& a) {
  const bool quick = !a.rest.empty() && a.rest[0] == "1";
  const bool with_nccl = a.rest.size() > 1 && a.rest[1] == "1";  // the parent checked nccl_missing
  const int n = a.size, me = a.rank;
  const auto all_sizes = allreduce::sizes(quick);
  const std::size_t max_count = all_sizes.back() / sizeof(float);
#if PVMM_BENCH_ALLREDUCE_GPU
  const int channels = allreduce::gpu_max_blocks();  // one per block
#else
  const int channels = 1;
#endif
  auto joined = join_team(a, max_count * sizeof(float), channels);
  const auto& ranks = joined.ranks;
  const pvmm::symmetric_window* const window = &joined.window;
  // sides[0] is pvmm's; then raw (cuda), then NCCL (--compare nccl, one GPU per rank).
  struct side {
    const char* name;
    std::unique_ptr<reducer> r;
  };
  std::vector<side> sides;
#if PVMM_BENCH_ALLREDUCE_GPU
  sides.push_back({"pvmm", allreduce::gpu_pvmm_reducer(*window, max_count)});
  sides.push_back({"raw", allreduce::gpu_raw_reducer(*ranks, max_count)});
#if PVMM_BENCH_NCCL
  if (with_nccl) sides.push_back({"nccl", allreduce::gpu_nccl_reducer(*ranks, max_count)});
#endif
#else
  sides.push_back({"pvmm", std::make_unique<host_reducer>(*window, max_count)});
#endif
  check(!with_nccl || sides.back().name == std::string("nccl"), "NCCL's side built in");
  std::vector<float> input(max_count);
  for (std::size_t i = 0; i < max_count; ++i) input[i] = static_cast<float>((me + 1) * static_cast<int>(i % 97));
  for (auto& s : sides) s.r->fill(input);

  bool ok = true;
  const int rounds = allreduce::rounds(quick);
  const int count_sides = static_cast<int>(sides.size());
  for (std::size_t s = 0; s < all_sizes.size() && ok; ++s) {
    const std::size_t bytes = all_sizes[s], count = bytes / sizeof(float);
    const int ops = allreduce::ops_for(bytes, quick);
    for (int round = -1; round < rounds; ++round) {  // round -1 warms every side up, uncounted
      std::vector<double> took(sides.size(), -1);    // -1: no such side (raw on the host backend)
      for (int i : side_order(round, static_cast<int>(s), count_sides))
        took[static_cast<std::size_t>(i)] = timed_block(*ranks, *sides[static_cast<std::size_t>(i)].r, count, ops);
      if (round < 0) continue;
      const double raw_s = sides.size() > 1 ? took[1] : -1;
      emit(fmt::format("{} {} {} {} {}\n", bytes, me, round, took[0], raw_s));
      if (with_nccl) emit(fmt::format("nccl-{} {} {} {} {}\n", bytes, me, round, took[0], took.back()));
    }
    for (auto& one : sides) ok = ok && checked(*ranks, *one.r, count, me, n, one.name);
  }
  if (!ok) return 1;   // the peers' next barrier fails within its timeout: every rank exits
  sync_point(*ranks);  // no rank unmaps while a peer still reads
  sides.clear();       // collective: raw closes the peers' buffers, then frees its own after a barrier
  return 0;
}

void team_allreduce(const team_flags& flags, const torch_results* torch) {
  const bool quick = flags.quick;
  const std::vector<int> sizes = team_sizes(flags);
  for (const std::string& name : flags.compare)
    if (name != "nccl" && name != "torch")
      fmt::print("\nteams, all-reduce, --compare {}: [pvmm-skip] unknown (nccl, torch)\n", name);
#if PVMM_BENCH_CUDA && !PVMM_BENCH_ALLREDUCE_GPU
  fmt::print(
      "\nteams, all-reduce: [pvmm-skip] not built: no CUDA compiler at configure time (the section has a kernel)\n");
  return;
#else
  const bool with_nccl = flags.compares("nccl"), with_torch = flags.compares("torch");
  torch_results torch_here;
  if (with_torch && torch == nullptr) {  // this table alone (teams-allreduce): run PyTorch's side for it
    torch_plan plan;
    for (std::size_t bytes : allreduce::sizes(quick)) plan.emplace_back(bytes, allreduce::ops_for(bytes, quick));
    torch_here = run_torch(sizes, {}, plan, allreduce::rounds(quick));
    torch = &torch_here;
  }
  // PVMM_BENCH_ALLREDUCE picks pvmm's side (team_allreduce.cu); the ranks inherit it, the title names it.
  const char* algorithm = std::getenv("PVMM_BENCH_ALLREDUCE");
  const std::string pvmm_side = algorithm == nullptr ? "one-shot"
                                : std::string(algorithm) == "two-shot"
                                    ? "pvmm two-shot (team_collectives.hpp), raw one-shot"
                                    : "pvmm auto (team_collectives.hpp: one-shot up to 256 KiB), raw one-shot";
  fmt::print(
      "\nteams, all-reduce: {}, float sums, {}; µs per all-reduce, median [IQR] of {} rounds (the slowest rank "
      "of each); raw = {}; GB/s: pvmm's algbw / busbw (NCCL's)\n",
      pvmm_side, placement(sizes), allreduce::rounds(quick),
#if PVMM_BENCH_CUDA
      "the same kernel on cuMemAlloc + cuIpc pointers, hand-written flags"
#else
      "none on the host backend"
#endif
  );
  fmt::print("  {:>2} {:>9}  {:<26} {:<26} {:<24} {}\n", "N", "size", "pvmm", "raw", "pvmm/raw [IQR]", "algbw / busbw");
  std::map<int, std::map<std::string, paired_rounds> > by_n;
  for (int n : sizes) {
    const bool nccl_here = with_nccl && nccl_missing(n).empty();
    by_n[n] = slowest_per_round(
        run_rank_processes("allreduce", n, {quick ? "1" : "0", nccl_here ? "1" : "0"}, std::chrono::seconds(300)));
    print_paired_rows(n, by_n[n], "", quick);
  }
  if (with_nccl) {
    fmt::print(
        "\nteams, all-reduce against NCCL: ncclAllReduce (float, sum, out of place; NVLS and CollNet off) as a third "
        "side of the same rounds, in the same processes; µs per all-reduce, median [IQR]; GB/s: NCCL's algbw / "
        "busbw\n");
    fmt::print("  {:>2} {:>9}  {:<26} {:<26} {:<24} {}\n", "N", "size", "pvmm", "nccl", "pvmm/nccl [IQR]",
               "algbw / busbw");
    for (int n : sizes) {
      if (const std::string why = nccl_missing(n); !why.empty()) {
        fmt::print("  {:>2}  [pvmm-skip] {}\n", n, why);
        continue;
      }
      print_paired_rows(n, by_n[n], "nccl-", quick);
    }
  }
  if (with_torch) {
    fmt::print(
        "\nteams, all-reduce against PyTorch SymmetricMemory{}: torch.ops.symm_mem.one_shot_all_reduce, the same "
        "sizes, operations and rounds in its own processes (one GPU each, multicast off), so not interleaved with "
        "pvmm's rounds: pvmm/torch is the ratio of the medians; GB/s: torch's algbw / busbw\n",
        torch->version.empty() ? "" : " (torch " + torch->version + ")");
    fmt::print("  {:>2} {:>9}  {:<26} {:<26} {:<9} {}\n", "N", "size", "pvmm", "torch", "pvmm/torch", "algbw / busbw");
    for (int n : sizes) {
      bool any = false;
      for (std::size_t bytes : allreduce::sizes(quick)) {
        const auto at = torch->allreduce.find({n, bytes});
        if (at == torch->allreduce.end()) continue;
        any = true;
        const std::vector<double>& pvmm_s = by_n[n].at(std::to_string(bytes)).pvmm;
        fmt::print("  {:>2} {:>9}  {:<26} {:<26} {:8.2f}x  {}\n", n, size_name(bytes), us_cell(pvmm_s),
                   us_cell(at->second), median(pvmm_s) / median(at->second), bandwidth(bytes, median(at->second), n));
      }
      if (!any) {
        const std::string why = torch->missing(n);
        fmt::print("  {:>2}  [pvmm-skip] {}\n", n, why.empty() ? "no result" : why);
      }
    }
  }
#endif
}

}  // namespace bench
