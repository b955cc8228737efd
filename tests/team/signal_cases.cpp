// The signal cases (issue 35: signal pads, put/wait-signal, barrier; cases.hpp): stream-ordered calls on a stream of
// the team's device, data written before a signal read after the matching wait, bounded waits that name the
// silent rank, and epochs (a late signal never satisfies a later wait).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <pvmm/pinned.hpp>
#include <pvmm/stream.hpp>
#include <pvmm/team.hpp>

#include "case_support.hpp"
#include "cases.hpp"

namespace pvmm_team_test {

using namespace std::chrono_literals;
using pvmm::errc;

namespace {

constexpr std::size_t words = 1024;  // written into each slot and read back by the next rank

std::string text(const pvmm::status& s) { return s ? std::string("success") : s.error().message(); }

struct signal_setup {
  pvmm::team team;
  pvmm::symmetric_window window;
  pvmm::stream stream;
};

// A team, a window with `channels` signal channels and a stream of the team's device; false (reported) on failure.
bool set_up(verdict& v, const std::shared_ptr<pvmm::bootstrap>& b, int channels, signal_setup& out) {
  auto t = pvmm::team::create(b, team_options_for(*b));
  if (!t) return v.check(false, where(*b) + "team::create: " + t.error().message()), false;
  pvmm::window_options o;
  o.size = words * sizeof(std::uint32_t);
  o.signal_channels = channels;
  o.timeout = 20s;
  auto w = pvmm::symmetric_window::create(*t, o);
  if (!w) return v.check(false, where(*b) + "window create: " + w.error().message()), false;
  auto s = pvmm::stream::create(t->device());
  if (!s) return v.check(false, where(*b) + "stream::create: " + s.error().message()), false;
  // A backend without signal kernels says so before looking at the arguments (the capability first).
  if (auto probe = w->put_signal(-1, 0, *s); probe.code() == errc::not_supported) {
    std::printf("[pvmm-skip] %s%s\n", where(*b).c_str(), probe.error().message().c_str());
    return false;
  }
  out = {std::move(*t), std::move(*w), std::move(*s)};
  return true;
}

// "sig-data": a ring of put/wait: each rank writes its words (stream-ordered), signals the next rank, waits for the
// previous one and reads its slot through the mapping; then 50 barriers on channel 1; no wait expired anywhere.
void data_case(verdict& v, const std::shared_ptr<pvmm::bootstrap>& b) {
  signal_setup s;
  if (!set_up(v, b, 2, s)) return;
  const int n = b->size(), me = b->rank(), next = (me + 1) % n, prev = (me + n - 1) % n;
  auto table = s.window.device_pointer_table();
  auto view = s.window.view();
  v.check(table && view && view->peers == *table && view->rank == me && view->size == n && view->channels == 2,
          where(*b) + "view and device_pointer_table disagree");
  // Page-locked staging: a pageable copy blocks the host thread inside the driver, and ranks that are threads of one
  // process share its staging (measured on the H200: rank 3 could not enqueue its signal while rank 0's pageable
  // copy waited for that signal).
  auto staging = pvmm::pinned_allocation::create(2 * words * sizeof(std::uint32_t));
  if (!staging) return v.check(false, where(*b) + "pinned staging: " + staging.error().message());
  auto* const mine = static_cast<std::uint32_t*>(staging->data());
  auto* const theirs = mine + words;
  for (int round = 0; round < 3; ++round) {
    for (std::size_t i = 0; i < words; ++i) {
      mine[i] = static_cast<std::uint32_t>(me * 1000003 + round * 7919 + i);
      theirs[i] = 0;
    }
    pvmm::stream_ref on = s.stream;
    v.check(on.copy_async(s.window.local(), mine, words * 4).has_value(), where(*b) + "copy into own slot");
    auto put = s.window.put_signal(next, 0, on);
    auto wait = s.window.wait_signal(prev, 0, on, 10s);
    v.check(put && wait, where(*b) + "put/wait: " + text(put) + " / " + text(wait));
    v.check(on.copy_async(theirs, s.window.peer(prev), words * 4).has_value(), where(*b) + "copy from peer");
    // The previous rank overwrites its slot next round only after this rank's signal says it has read it.
    auto back = s.window.put_signal(prev, 1, on);
    auto ack = s.window.wait_signal(next, 1, on, 10s);
    v.check(back && ack && on.synchronize().has_value(), where(*b) + "acknowledge: " + text(back) + " / " + text(ack));
    for (std::size_t i = 0; i < words; ++i)
      if (theirs[i] != static_cast<std::uint32_t>(prev * 1000003 + round * 7919 + i)) {
        v.check(false, where(*b) + "round " + std::to_string(round) + ": rank " + std::to_string(prev) + "'s word " +
                           std::to_string(i) + " read after its signal is " + std::to_string(theirs[i]));
        break;
      }
  }
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 50; ++i)
    if (auto bar = s.window.barrier(s.stream, 10s, 1); !bar) {
      v.check(false, where(*b) + "barrier: " + bar.error().message());
      break;
    }
  v.check(s.stream.synchronize().has_value(), where(*b) + "synchronize");
  auto st = s.window.signal_status();
  v.check(st.has_value(), where(*b) + "signal_status after matched waits: " + text(st));
  v.check(std::chrono::steady_clock::now() - start < 10s, where(*b) + "50 barriers took over 10 s");
  v.check(b->barrier(pvmm::deadline_in(20s)).has_value(), where(*b) + "bootstrap barrier before release");
}

// "sig-silent": rank 0 stays silent; every other rank's bounded wait expires (timeout naming rank 0 and channel 0).
// Then rank 0 signals once, late: it counts for the expired step, so the next wait must expire again (its full
// timeout); the third wait ends once rank 0 has signalled for the second and the third.
void silent_case(verdict& v, const std::shared_ptr<pvmm::bootstrap>& b) {
  signal_setup s;
  if (!set_up(v, b, 1, s)) return;
  const int me = b->rank();
  const auto sync_all = [&](const char* what) {
    v.check(b->barrier(pvmm::deadline_in(20s)).has_value(), where(*b) + "bootstrap barrier " + what);
  };
  if (me != 0) {
    const auto start = std::chrono::steady_clock::now();
    auto wait = s.window.wait_signal(0, 0, s.stream, 300ms);
    v.check(wait && s.stream.synchronize(), where(*b) + "wait enqueued and ran: " + text(wait));
    v.check(std::chrono::steady_clock::now() - start < 5s, where(*b) + "a 300 ms wait held its stream over 5 s");
    auto st = s.window.signal_status();
    v.check(
        !st && st.code() == errc::timeout && st.error().message().find("for rank 0 on channel 0") != std::string::npos,
        where(*b) + "expected timeout naming rank 0 and channel 0, got " + text(st));
  }
  sync_all("after the silent step");
  if (me == 0)
    for (int r = 1; r < b->size(); ++r) v.check(s.window.put_signal(r, 0, s.stream).has_value(), "late put");
  v.check(s.stream.synchronize().has_value(), where(*b) + "synchronize");
  sync_all("after the late signal");
  if (me != 0) {
    const auto start = std::chrono::steady_clock::now();
    v.check(s.window.wait_signal(0, 0, s.stream, 400ms) && s.stream.synchronize(), where(*b) + "second wait");
    const auto took = std::chrono::steady_clock::now() - start;
    v.check(took >= 390ms, where(*b) + "the late signal of the expired step satisfied the next wait (after " +
                               std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()) +
                               " ms)");
  }
  sync_all("after the second wait");
  // Every wait consumed its epoch, the expired ones too: rank 0 signals for the second (expired) wait and the third.
  if (me == 0)
    for (int r = 1; r < b->size(); ++r)
      for (int k = 0; k < 2; ++k) v.check(s.window.put_signal(r, 0, s.stream).has_value(), "second put");
  if (me != 0) {
    const auto start = std::chrono::steady_clock::now();
    v.check(s.window.wait_signal(0, 0, s.stream, 10s) && s.stream.synchronize(), where(*b) + "third wait");
    v.check(std::chrono::steady_clock::now() - start < 5s,
            where(*b) + "rank 0's signals for the second and third waits did not end the third");
  }
  v.check(s.stream.synchronize().has_value(), where(*b) + "synchronize");
  sync_all("before release");
}

// "sig-absent": the upper half of the ranks (the last, of 2) never comes to the barrier (they return, as dead ranks
// would); every other rank's barrier ends within ONE timeout however many are missing (it was one timeout per
// missing rank), and signal_status names the first missing rank.
void absent_case(verdict& v, const std::shared_ptr<pvmm::bootstrap>& b) {
  signal_setup s;
  if (!set_up(v, b, 1, s)) return;
  const int first_absent = std::max(1, b->size() / 2);
  if (b->rank() >= first_absent || b->size() == 1) return;  // gone: team and window released, as a dying rank's
  const auto start = std::chrono::steady_clock::now();
  v.check(s.window.barrier(s.stream, 1s).has_value() && s.stream.synchronize(), where(*b) + "barrier enqueued");
  const auto took = std::chrono::steady_clock::now() - start;
  v.check(took < 1900ms, where(*b) + "the barrier held its stream " +
                             std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()) +
                             " ms for a 1 s timeout with " + std::to_string(b->size() - first_absent) +
                             " rank(s) missing");
  auto st = s.window.signal_status();
  v.check(!st && st.code() == errc::timeout &&
              st.error().message().find("for rank " + std::to_string(first_absent)) != std::string::npos,
          where(*b) + "expected timeout naming rank " + std::to_string(first_absent) + ", got " + text(st));
}

// "sig-bad": refusals before anything is enqueued, and channels that differ between ranks.
void bad_case(verdict& v, const std::shared_ptr<pvmm::bootstrap>& b) {
  signal_setup s;
  if (!set_up(v, b, 2, s)) return;
  const int me = b->rank(), other = (me + 1) % b->size();
  const auto refused = [&](const pvmm::status& st, errc code, const char* what) {
    v.check(!st && st.code() == code, where(*b) + what + ": " + text(st));
  };
  refused(s.window.put_signal(me, 0, s.stream), errc::invalid_argument, "signal itself");
  refused(s.window.put_signal(b->size(), 0, s.stream), errc::invalid_argument, "peer out of range");
  refused(s.window.put_signal(other, 2, s.stream), errc::invalid_argument, "channel out of range");
  refused(s.window.wait_signal(other, -1, s.stream, 1s), errc::invalid_argument, "negative channel");
  refused(s.window.wait_signal(other, 0, s.stream, -1ms), errc::invalid_argument, "negative timeout");
  refused(s.window.barrier(pvmm::stream_ref(), 1s), errc::invalid_argument, "empty stream");
  pvmm::symmetric_window empty;
  refused(empty.barrier(s.stream, 1s), errc::already_released, "empty window");
  pvmm::window_options o;
  o.size = 4096;
  o.timeout = 20s;
  auto plain = pvmm::symmetric_window::create(s.team, o);
  v.check(plain.has_value(), where(*b) + "a window without pads");
  if (plain) {
    refused(plain->put_signal(other, 0, s.stream), errc::invalid_argument, "no pads");
    v.check(!plain->view() && plain->view().code() == errc::invalid_argument, where(*b) + "view without pads");
  }
  o.signal_channels = me == 0 ? 1 : 2;  // rank 0 disagrees: every rank fails alike
  auto mismatched = pvmm::symmetric_window::create(s.team, o);
  v.check(!mismatched && mismatched.code() == errc::team_mismatch &&
              mismatched.error().message().find("signal channel") != std::string::npos,
          where(*b) + "mismatched channels: " + (mismatched ? std::string("success") : mismatched.error().message()));
  o.signal_channels = -1;
  auto negative = pvmm::symmetric_window::create(s.team, o);
  v.check(!negative && negative.code() == errc::invalid_argument, where(*b) + "negative channels");
}

}  // namespace

bool run_signal_case(verdict& v, const case_params& p, std::shared_ptr<pvmm::bootstrap> ranks) {
  if (p.name == "sig-data")
    data_case(v, ranks);
  else if (p.name == "sig-silent")
    silent_case(v, ranks);
  else if (p.name == "sig-absent")
    absent_case(v, ranks);
  else if (p.name == "sig-bad")
    bad_case(v, ranks);
  else
    return false;
  return true;
}

}  // namespace pvmm_team_test
