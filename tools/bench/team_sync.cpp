// pvmm-bench teams, signals: barrier and put/wait-signal latency between N = 2, 4, 8 endpoint processes, one GPU
// each where the machine has N GPUs that reach each other, else all on device 0 (team_ranks.hpp), in µs per
// operation: pvmm's stream-ordered calls, on each path (window_options::stream_signals: kernel and driver, a window
// each), against the same steps written on the raw calls.
//   barrier   pvmm: symmetric_window::barrier(channel, stream, timeout) (cuda: one one-thread kernel per call; host: a
//   host
//             function on the stream's worker). Raw: every rank writes its epoch into each peer's inbox, then waits
//             for each peer's epoch in its own.
//   put-wait  ping-pong in pairs (0-1, 2-3, ...; all pairs at once): one rank puts, the other waits and puts back;
//             printed per one-way signal (half a round trip). pvmm: put_signal / wait_signal.
// Raw path, cuda: cuStreamWriteValue32 into the peer's inbox and cuStreamWaitValue32 (GEQ) on this rank's, on the
// same stream (the rank's device). Across GPUs the write goes through the window's mapping of the peer's slot,
// which pvmm granted to this rank's device: stream memory operations take any address the stream's device can
// reach, and the default write flag fences before the write, so the data the epoch announces is visible first. Chosen
// because it is the raw driver's own stream-ordered signal (what NVSHMEM's on-stream signalling uses), and it answers
// issue 35's question whether stream memory operations would beat pvmm's kernel. It has no timeout of its own: the
// bench bounds it from the host (the stream is polled against a deadline; on expiry the rank fails naming the step, and
// exiting tears its context and the stuck wait down). Launching pvmm's own kernel through the driver would measure only
// pvmm's host-side checks. Raw path, host: the same counters written with __atomic (release) and spun on (acquire) with
// a deadline, inline on the calling thread: there is no stream to order against, so the ratio is what pvmm's stream (a
// worker thread) costs. The raw inboxes live in each rank's data slot of the window: the mapping is pvmm's (the
// creation table times it); only the signalling is timed. Each timed block enqueues `ops` operations and then
// synchronises the stream; ranks line up at a bootstrap barrier before every block; a round counts its slowest rank;
// rounds alternate the sides in a seeded order. Checked after the rounds: pvmm's signal_status() (no wait expired) and
// every raw inbox holding the last epoch its peer wrote.
#include <array>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <vector>

#include <fmt/format.h>

#include <pvmm/pvmm.hpp>
#include <pvmm/team.hpp>

#include "bench.hpp"
#include "team_ranks.hpp"

namespace bench {
namespace {

constexpr std::chrono::milliseconds wait_limit{10000};  // every signal wait, pvmm's and raw
constexpr int barrier_kind = 0, ping_pong_kind = 1;     // pvmm's channel and the raw inboxes' row

// The raw side's steps over uint32 inboxes in each rank's data slot: inbox[kind][src], written by src.
class raw_signals {
 public:
  raw_signals(const pvmm::symmetric_window& w, pvmm::stream_ref s) : window_(w), stream_(s) {}

  std::uint32_t* inbox(int owner, int kind, int src) const {
    return static_cast<std::uint32_t*>(window_.peer(owner)) + kind * window_.size() + src;
  }

#if PVMM_BENCH_CUDA
  void put(int to, int kind, std::uint32_t epoch) const {
    CU(cuStreamWriteValue32(native(), ptr(inbox(to, kind, window_.rank())), epoch, CU_STREAM_WRITE_VALUE_DEFAULT));
  }
  void wait(int from, int kind, std::uint32_t epoch) const {
    CU(cuStreamWaitValue32(native(), ptr(inbox(window_.rank(), kind, from)), epoch, CU_STREAM_WAIT_VALUE_GEQ));
  }
  // cuStreamSynchronize with a deadline: polled as its default spin does.
  void finish() const {
    const auto until = clock_type::now() + wait_limit;
    CUresult r;
    while ((r = cuStreamQuery(native())) == CUDA_ERROR_NOT_READY)
      if (clock_type::now() > until) fail("a raw stream wait (cuStreamWaitValue32) did not finish in time");
    CU(r);
  }

 private:
  CUstream native() const { return reinterpret_cast<CUstream>(stream_.native_handle().value); }
  static CUdeviceptr ptr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }
#else
  void put(int to, int kind, std::uint32_t epoch) const {
    __atomic_store_n(inbox(to, kind, window_.rank()), epoch, __ATOMIC_RELEASE);
  }
  void wait(int from, int kind, std::uint32_t epoch) const {
    const std::uint32_t* const at = inbox(window_.rank(), kind, from);
    const auto until = clock_type::now() + wait_limit;
    while (static_cast<std::int32_t>(__atomic_load_n(at, __ATOMIC_ACQUIRE) - epoch) < 0)
      if (clock_type::now() > until) fail(fmt::format("a raw wait for rank {} timed out", from));
  }
  void finish() const {}

 private:
#endif
  [[noreturn]] void fail(const std::string& what) const {
    std::fprintf(stderr, "pvmm-bench: FAIL: teams sync rank %d: %s\n", window_.rank(), what.c_str());
    std::exit(1);
  }
  const pvmm::symmetric_window& window_;
  pvmm::stream_ref stream_;
};

// `ops` steps, then the side's finish; seconds per step.
double timed_block(pvmm::bootstrap& ranks, int ops, const std::function<void()>& step,
                   const std::function<void()>& finish) {
  sync_point(ranks);
  const auto t0 = clock_type::now();
  for (int i = 0; i < ops; ++i) step();
  finish();
  return seconds_since(t0) / ops;
}

const char* const kind_names[] = {"barrier", "put-wait"};

}  // namespace

int team_sync_rank(const rank_args& a) {
  const bool quick = !a.rest.empty() && a.rest[0] == "1";
  auto joined = join_team(a, 4096, 2);  // the slot rounded up to the granularity; channels: barrier, ping-pong
  const auto& ranks = joined.ranks;
  const pvmm::symmetric_window* const window = &joined.window;
  auto stream = pvmm::stream::create(joined.team.device());  // the rank's device (team_ranks.hpp)
  check(stream.has_value(), "stream::create");
  const int n = a.size, me = a.rank, partner = me ^ 1;  // n is even: 2, 4, 8
  // The raw inboxes start at zero on every rank before any rank writes one.
  std::vector<std::uint32_t> zeros(2 * static_cast<std::size_t>(n), 0);
  check(stream->copy_async(window->local(), zeros.data(), zeros.size() * 4).has_value(), "zero the raw inboxes");
  check(stream->synchronize().has_value(), "stream synchronize");
  sync_point(*ranks);

  // The driver path's side: a second window, its calls the same as the kernel path's (pvmm_step below).
  pvmm::window_options driver_options;
  driver_options.size = 4096;
  driver_options.signal_channels = 2;
  driver_options.stream_signals = pvmm::stream_signal_path::driver;
  auto driver_window = pvmm::symmetric_window::create(joined.team, driver_options);
  check(driver_window.has_value(), "symmetric_window::create (driver path)");
  const raw_signals raw(*window, *stream);
  std::uint32_t raw_epoch[2] = {0, 0};
  const std::function<void()> pvmm_finish = [&] { check(stream->synchronize().has_value(), "stream synchronize"); };
  const std::function<void()> raw_finish = [&] { raw.finish(); };
  const auto pvmm_steps = [&](const pvmm::symmetric_window& w) {
    return std::array<std::function<void()>, 2>{
        [&] { check(w.barrier(barrier_kind, *stream, wait_limit).has_value(), "symmetric_window::barrier"); },
        [&] {
          const auto put = [&] {
            check(w.put_signal(partner, ping_pong_kind, *stream).has_value(), "symmetric_window::put_signal");
          };
          const auto wait = [&] {
            check(w.wait_signal(partner, ping_pong_kind, *stream, wait_limit).has_value(),
                  "symmetric_window::wait_signal");
          };
          if (me % 2 == 0)
            put(), wait();
          else
            wait(), put();
        }};
  };
  const auto pvmm_step = pvmm_steps(*window);
  const auto driver_step = pvmm_steps(*driver_window);
  const std::function<void()> raw_step[2] = {
      [&] {
        const std::uint32_t e = ++raw_epoch[barrier_kind];
        for (int r = 0; r < n; ++r)
          if (r != me) raw.put(r, barrier_kind, e);
        for (int r = 0; r < n; ++r)
          if (r != me) raw.wait(r, barrier_kind, e);
      },
      [&] {
        const std::uint32_t e = ++raw_epoch[ping_pong_kind];
        if (me % 2 == 0)
          raw.put(partner, ping_pong_kind, e), raw.wait(partner, ping_pong_kind, e);
        else
          raw.wait(partner, ping_pong_kind, e), raw.put(partner, ping_pong_kind, e);
      }};

  const int ops = quick ? 2 : 32, rounds = quick ? 2 : 9;
  for (int kind : {barrier_kind, ping_pong_kind}) {
    const double per_op = kind == ping_pong_kind ? 0.5 : 1.0;  // a round trip is two one-way signals
    for (int round = -1; round < rounds; ++round) {            // round -1 warms both sides up, uncounted
      double seconds[3] = {0, 0, 0};                           // kernel path, raw, driver path
      const std::function<void()>* steps[3] = {&pvmm_step[kind], &raw_step[kind], &driver_step[kind]};
      for (int side : side_order(round, kind, 3))
        seconds[side] = timed_block(*ranks, ops, *steps[side], side == 1 ? raw_finish : pvmm_finish) * per_op;
      if (round >= 0) {
        emit(fmt::format("{} {} {} {} {}\n", kind_names[kind], me, round, seconds[0], seconds[1]));
        emit(fmt::format("{}/driver {} {} {} {}\n", kind_names[kind], me, round, seconds[2], seconds[1]));
      }
    }
  }

  // No pvmm wait expired (either path), and every raw inbox holds its peer's last epoch.
  for (const pvmm::symmetric_window* w : {window, static_cast<const pvmm::symmetric_window*>(&*driver_window)})
    if (auto s = w->signal_status(); !s) {
      std::fprintf(stderr, "pvmm-bench: FAIL: teams sync rank %d: %s\n", me, s.error().message().c_str());
      return 1;
    }
  std::vector<std::uint32_t> inboxes(zeros.size());
  check(stream->copy_async(inboxes.data(), window->local(), inboxes.size() * 4).has_value(), "read the inboxes");
  check(stream->synchronize().has_value(), "stream synchronize");
  for (int r = 0; r < n; ++r) {
    const std::uint32_t barrier_seen = inboxes[static_cast<std::size_t>(barrier_kind * n + r)];
    const std::uint32_t ping_seen = inboxes[static_cast<std::size_t>(ping_pong_kind * n + r)];
    if ((r != me && barrier_seen != raw_epoch[barrier_kind]) ||
        (r == partner && ping_seen != raw_epoch[ping_pong_kind])) {
      std::fprintf(stderr,
                   "pvmm-bench: FAIL: teams sync rank %d: raw inbox from rank %d holds %u / %u, expected %u / %u\n", me,
                   r, barrier_seen, ping_seen, raw_epoch[barrier_kind], raw_epoch[ping_pong_kind]);
      return 1;
    }
  }
  sync_point(*ranks);  // no rank unmaps while a peer still reads
  return 0;
}

void team_sync(const team_flags& flags) {
  fmt::print(
      "\nteams, signals: µs per operation, median [IQR] of {} rounds (the slowest rank of each), {}; raw = {}; "
      "put-wait = one way (half a ping-pong round trip), all pairs at once\n",
      flags.quick ? 2 : 9, placement(team_sizes(flags)),
#if PVMM_BENCH_CUDA
      "cuStreamWriteValue32 + cuStreamWaitValue32 on the same stream"
#else
      "__atomic store / acquire spin inline, no stream"
#endif
  );
  fmt::print("  {:<16} {:>2}  {:<26} {:<26} {}\n", "operation", "N", "pvmm", "raw", "pvmm/raw [IQR]");
  for (int n : team_sizes(flags)) {
    const auto rows =
        slowest_per_round(run_rank_processes("sync", n, {flags.quick ? "1" : "0"}, std::chrono::seconds(120)));
    for (const char* kind : kind_names)
      for (const std::string path : {"", "/driver"}) {  // the kernel path's row, then the driver path's
        const auto at = rows.find(kind + path);
        check(at != rows.end(), "a teams sync result");
        fmt::print("  {:<16} {:>2}  {}\n", kind + path, n, latency_columns(at->second, 1e6));
      }
  }
}

}  // namespace bench
