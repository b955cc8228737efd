// The signal cases of issue 48 (cases.hpp): a peer that forges every word of a rank's pad changes none of the
// pointers, counts or error record that rank reads (item 1); clear_signal_status() reads and clears the record
// (item 14); team::abort() and release while a barrier is still queued on a stream (item 13).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <pvmm/device.hpp>
#include <pvmm/stream.hpp>
#include <pvmm/team.hpp>
#include <pvmm/team_device.hpp>

#include "case_support.hpp"
#include "cases.hpp"

namespace pvmm_team_test {

using namespace std::chrono_literals;
using pvmm::errc;

namespace {

using guarded = signal_setup;

// A signal_setup with `channels` channels; false (reported or skipped) when it cannot run here.
bool make(verdict& v, const std::shared_ptr<pvmm::bootstrap>& b, int channels, guarded& out) {
  if (!make_signal_setup(v, b, 4096, channels, out)) return false;
  if (auto probe = out.window.barrier(-1, out.stream, 0ms); probe.code() == errc::not_supported) {
    std::printf("[pvmm-skip] %s%s\n", where(*b).c_str(), probe.error().message().c_str());
    return false;
  }
  return true;
}

// `bytes` read from `at` (memory of the team's device) through a stream copy.
std::vector<unsigned char> read_back(pvmm::stream_ref on, const void* at, std::size_t bytes) {
  std::vector<unsigned char> out(bytes, 0xee);
  if (!on.copy_async(out.data(), at, bytes) || !on.synchronize()) out.clear();
  return out;
}

// "sig-forger": the last rank plays a forger: it writes 0x41 over every byte of rank 0's pad that it maps (the pad
// and the rest of its chunk). Rank 0's view, pointer table, expected counters and error record are unchanged.
void forger_case(verdict& v, const std::shared_ptr<pvmm::bootstrap>& b) {
  guarded g;
  if (!make(v, b, 2, g)) return;
  const int n = b->size(), me = b->rank(), forger = n - 1;
  auto view = g.window.view();
  if (!view) return v.check(false, where(*b) + "view: " + view.error().message());
  const std::size_t own = pvmm::window_view::own_bytes(view->channels, n);
  const auto own_before = read_back(g.stream, view->own, own);
  v.check(b->barrier(pvmm::deadline_in(20s)).has_value(), where(*b) + "bootstrap barrier before the forgery");
  if (me == forger) {
    // The whole chunk of rank 0's pad that the forger maps: the pad rounded up to the window memory's granularity.
    pvmm::allocation_properties p;
    p.location = pvmm::location::device(g.team.device());
    p.exportable = pvmm::handle_types::posix_fd;
    const std::size_t granule = pvmm::query_granularity(p).value_or(pvmm::granularity{4096, 4096}).minimum;
    const std::size_t pad = pvmm::window_view::pad_bytes(view->channels, n);
    const std::size_t chunk = std::min<std::size_t>((pad + granule - 1) / granule * granule, view->pad_stride);
    std::vector<unsigned char> forged(chunk, 0x41);
    v.check(g.stream.copy_async(view->pad_base, forged.data(), chunk).has_value() && g.stream.synchronize(),
            where(*b) + "forger's write into rank 0's pad");
  }
  v.check(b->barrier(pvmm::deadline_in(20s)).has_value(), where(*b) + "bootstrap barrier after the forgery");
  if (me == 0) {
    auto after = g.window.view();
    v.check(after && after->own == view->own && after->peers == view->peers, where(*b) + "view changed");
    // The table is read back by a copy: view().peer(r) dereferences it, which only a kernel may do on a GPU backend
    // (the table is device memory there).
    const auto table = read_back(g.stream, view->peers, sizeof(void*) * static_cast<std::size_t>(n));
    for (int r = 0; r < n && table.size() == sizeof(void*) * static_cast<std::size_t>(n); ++r) {
      void* entry = nullptr;
      std::memcpy(&entry, table.data() + sizeof(void*) * static_cast<std::size_t>(r), sizeof entry);
      v.check(entry == g.window.peer(r), where(*b) + "device_pointer_table()[" + std::to_string(r) + "] is forged");
    }
    const auto own_after = read_back(g.stream, view->own, own);
    v.check(!own_after.empty() && own_after == own_before, where(*b) +
                                                               "the owner-only block (expected counters, "
                                                               "error record, table) changed");
    auto st = g.window.signal_status();
    v.check(st.has_value(), where(*b) + "signal_status after the forgery: " + outcome_text(st));
  }
  v.check(b->barrier(pvmm::deadline_in(20s)).has_value(), where(*b) + "bootstrap barrier before release");
}

// "sig-clear": rank 0 waits for a silent rank 1 and expires; clear_signal_status() returns that timeout and clears
// it; a barrier every rank joins afterwards leaves signal_status() at success.
void clear_case(verdict& v, const std::shared_ptr<pvmm::bootstrap>& b) {
  guarded g;
  if (!make(v, b, 1, g)) return;
  if (b->rank() == 0) {
    v.check(g.window.wait_signal(1, 0, g.stream, 50ms) && g.stream.synchronize(), where(*b) + "wait enqueued");
    auto first = g.window.signal_status();
    auto cleared = g.window.clear_signal_status();
    auto now = g.window.signal_status();
    v.check(!first && first.code() == errc::timeout, where(*b) + "signal_status after expiry: " + outcome_text(first));
    v.check(!cleared && cleared.code() == errc::timeout, where(*b) + "clear_signal_status: " + outcome_text(cleared));
    v.check(now.has_value(), where(*b) + "signal_status after clear: " + outcome_text(now));
  }
  v.check(b->barrier(pvmm::deadline_in(20s)).has_value(), where(*b) + "bootstrap barrier");
  // Rank 1 owes rank 0 the signal of the expired wait: it sends it before the barrier, so the counts match again.
  if (b->rank() == 1) v.check(g.window.put_signal(0, 0, g.stream).has_value(), where(*b) + "late signal");
  v.check(g.window.barrier(0, g.stream, 10s) && g.stream.synchronize(), where(*b) + "barrier enqueued");
  auto st = g.window.signal_status();
  v.check(st.has_value(), where(*b) + "signal_status after a barrier every rank joined: " + outcome_text(st));
  v.check(b->barrier(pvmm::deadline_in(20s)).has_value(), where(*b) + "bootstrap barrier before release");
}

void hold(void* gate) {
  auto* open = static_cast<std::atomic<bool>*>(gate);
  for (int i = 0; i < 5000 && !open->load(); ++i) std::this_thread::sleep_for(1ms);
}

// "sig-abort-queued": rank 0 queues a barrier behind a held host function, aborts its team and releases the window
// and team, then lets the stream run: the barrier runs on memory it holds, expires, and nothing faults.
// Process ranks only (a fault would end the process).
void abort_queued_case(verdict& v, const std::shared_ptr<pvmm::bootstrap>& b, bool one_rank_per_process) {
  if (!one_rank_per_process) {
    std::printf("[pvmm-skip] %ssig-abort-queued runs in rank processes only (a fault ends the process)\n",
                where(*b).c_str());
    return;
  }
  guarded g;
  if (!make(v, b, 1, g)) return;
  v.check(b->barrier(pvmm::deadline_in(20s)).has_value(), where(*b) + "every rank has its window");
  if (b->rank() == 0) {
    std::atomic<bool> gate{false};
    v.check(g.stream.launch_host_function(hold, &gate).has_value(), where(*b) + "held host function");
    v.check(g.window.barrier(0, g.stream, 100ms).has_value(), where(*b) + "barrier queued");
    g.team.abort();
    v.check(g.window.release().has_value() && g.team.release().has_value(), where(*b) + "release");
    gate.store(true);
    v.check(g.stream.synchronize().has_value(), where(*b) + "the queued barrier ran");
  }
  // No closing bootstrap barrier: rank 0's abort aborted its bootstrap too; the others just leave.
}

}  // namespace

bool run_signal_guard_case(verdict& v, const case_params& p, std::shared_ptr<pvmm::bootstrap> ranks) {
  return run_named(p.name, {{"sig-forger", [&] { forger_case(v, ranks); }},
                            {"sig-clear", [&] { clear_case(v, ranks); }},
                            {"sig-abort-queued", [&] { abort_queued_case(v, ranks, p.one_rank_per_process); }}});
}

}  // namespace pvmm_team_test
