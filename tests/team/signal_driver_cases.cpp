// The driver path's own cases (window_options::stream_signals = driver; issue 51 item 1; cases.hpp). The shared
// signal cases run on it too, named with the ":driver" suffix (suite.cpp). Here: the path agreed by every rank, and
// team::abort releasing a driver wait at once.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>

#include <pvmm/stream.hpp>
#include <pvmm/team.hpp>

#include "case_support.hpp"
#include "cases.hpp"

namespace pvmm_team_test {

using namespace std::chrono_literals;
using pvmm::errc;

namespace {

// Whether stream-ordered waits run between these ranks: on the GPU backends, thread ranks sharing one device are
// refused on every rank (symmetric_window::barrier); skipped with the reason there.
bool waits_run_here(const std::shared_ptr<pvmm::bootstrap>& b, const pvmm::symmetric_window& w, pvmm::stream_ref s) {
  auto probe = w.barrier(-1, s, 0ms);
  if (probe.code() != errc::not_supported) return true;
  std::printf("[pvmm-skip] %s%s\n", where(*b).c_str(), probe.error().message().c_str());
  return false;
}

// "sig-path-mismatch": rank 0 asks for the driver path, the others for the kernel path: team_mismatch on every
// rank, naming the path; a value that is neither: invalid_argument on every rank; then both ranks agree on the
// driver path and a barrier runs on it.
void mismatch_case(verdict& v, const std::shared_ptr<pvmm::bootstrap>& b) {
  auto t = pvmm::team::create(b, team_options_for(*b));
  if (!t) return v.check(false, where(*b) + "team::create: " + t.error().message());
  pvmm::window_options o;
  o.size = 4096;
  o.signal_channels = 1;
  o.timeout = 20s;
  o.stream_signals = b->rank() == 0 ? pvmm::stream_signal_path::driver : pvmm::stream_signal_path::kernel;
  auto mixed = pvmm::symmetric_window::create(*t, o);
  if (!mixed && mixed.code() == errc::not_supported) {  // rank 0's refusal, heard by every rank
    std::printf("[pvmm-skip] %s%s\n", where(*b).c_str(), mixed.error().message().c_str());
    return;
  }
  v.check(!mixed && mixed.code() == errc::team_mismatch &&
              mixed.error().message().find("stream_signals") != std::string::npos,
          where(*b) + "paths differ: " + (mixed ? std::string("success") : mixed.error().message()));
  o.stream_signals = static_cast<pvmm::stream_signal_path>(7);
  auto bad = pvmm::symmetric_window::create(*t, o);
  v.check(!bad && bad.code() == errc::invalid_argument,
          where(*b) + "path 7: " + (bad ? "success" : bad.error().message()));
  o.stream_signals = pvmm::stream_signal_path::driver;
  auto w = pvmm::symmetric_window::create(*t, o);
  auto s = pvmm::stream::create(t->device());
  if (!w || !s) return v.check(false, where(*b) + "driver window or stream: " + (w ? s.error() : w.error()).message());
  if (!waits_run_here(b, *w, *s)) return;
  v.check(w->barrier(0, *s, 10s) && s->synchronize() && w->signal_status(),
          where(*b) + "a barrier on the agreed driver path");
  v.check(b->barrier(pvmm::deadline_in(20s)).has_value(), where(*b) + "bootstrap barrier before release");
}

// "sig-path-abort": on the driver path, rank 0 waits for rank 1 (which stays silent) with a 20 s timeout; another
// thread aborts rank 0's team 100 ms later (the others wait at a bootstrap barrier, which the abort ends): the watchdog
// releases the wait within moments, signal_status says peer_lost naming rank 0 as the aborting rank, and nothing new is
// enqueued after the abort.
void abort_case(verdict& v, const std::shared_ptr<pvmm::bootstrap>& b) {
  use_signal_path(pvmm::stream_signal_path::driver);
  signal_setup s;
  if (!make_signal_setup(v, b, 4096, 1, s) || !waits_run_here(b, s.window, s.stream)) return;
  v.check(b->barrier(pvmm::deadline_in(20s)).has_value(), where(*b) + "every rank has its window");
  if (b->rank() != 0) {
    // Alive, and silent, until rank 0's abort reaches this rank's bootstrap (a peer that exited would end rank 0's
    // wait first, as peer_lost naming it).
    v.check(!b->barrier(pvmm::deadline_in(20s)), where(*b) + "rank 0's abort ended this rank's bootstrap barrier");
    std::this_thread::sleep_for(1s);  // then stays a while: its exit would race rank 0's own abort word
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  v.check(s.window.wait_signal(1, 0, s.stream, 20s).has_value(), where(*b) + "wait enqueued");
  std::thread aborter([&] {
    std::this_thread::sleep_for(100ms);
    s.team.abort();
  });
  v.check(s.stream.synchronize().has_value(), where(*b) + "the released wait let the stream go on");
  const auto took = std::chrono::steady_clock::now() - start;
  aborter.join();
  v.check(took < 2s, where(*b) + "the abort released the wait after " +
                         std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()) + " ms");
  auto st = s.window.signal_status();
  v.check(!st && st.code() == errc::peer_lost && st.error().message().find("rank 0 aborted") != std::string::npos,
          where(*b) + "signal_status after the abort: " + outcome_text(st));
  auto late = s.window.wait_signal(1, 0, s.stream, 1s);
  v.check(!late && late.code() == errc::peer_lost, where(*b) + "a wait after the abort: " + outcome_text(late));
}

// "sig-path-forged": rank 1 writes into rank 0's stream inbox a count far ahead in unsigned terms but behind in the
// wrap-safe order the driver's wait compares in (its top bit set); rank 0's wait for rank 1 still ends at its
// deadline, as a timeout naming rank 1. (An unsigned atomic max kept the forged value, and the wait went on for good.)
void forged_case(verdict& v, const std::shared_ptr<pvmm::bootstrap>& b) {
  use_signal_path(pvmm::stream_signal_path::driver);
  signal_setup s;
  if (!make_signal_setup(v, b, 4096, 1, s) || !waits_run_here(b, s.window, s.stream)) return;
  auto view = s.window.view();
  if (!view) return v.check(false, where(*b) + "view: " + view.error().message());
  if (b->rank() == 1) {
    const std::uint64_t forged = 0xC1C1C1C1C1C1C1C1ull;
    v.check(s.stream.copy_async(view->stream_inbox(0, 0, 1), &forged, sizeof forged) && s.stream.synchronize(),
            where(*b) + "the forged count written into rank 0's stream inbox");
  }
  v.check(b->barrier(pvmm::deadline_in(20s)).has_value(), where(*b) + "bootstrap barrier after the forgery");
  if (b->rank() == 0) {
    const auto start = std::chrono::steady_clock::now();
    v.check(s.window.wait_signal(1, 0, s.stream, 300ms) && s.stream.synchronize(), where(*b) + "wait enqueued");
    const auto took = std::chrono::steady_clock::now() - start;
    v.check(took < 5s, where(*b) + "the wait past a forged count took " +
                           std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()) + " ms");
    auto st = s.window.signal_status();
    v.check(
        !st && st.code() == errc::timeout && st.error().message().find("for rank 1 on channel 0") != std::string::npos,
        where(*b) + "signal_status after the forged count: " + outcome_text(st));
  }
  v.check(b->barrier(pvmm::deadline_in(20s)).has_value(), where(*b) + "bootstrap barrier before release");
}

}  // namespace

bool run_signal_driver_case(verdict& v, const case_params& p, std::shared_ptr<pvmm::bootstrap> ranks) {
  return run_named(p.name, {{"sig-path-mismatch", [&] { mismatch_case(v, ranks); }},
                            {"sig-path-abort", [&] { abort_case(v, ranks); }},
                            {"sig-path-forged", [&] { forged_case(v, ranks); }}});
}

}  // namespace pvmm_team_test
