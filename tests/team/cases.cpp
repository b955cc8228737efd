// The team case bodies. Data written into a slot is read back through the flat window and through the pointer
// table, and compared with a checksum its writer reported through the bootstrap (an independent path).
#include "cases.hpp"
#include "case_support.hpp"
#include "device_memory.hpp"
#include "open_fds.hpp"
#include "sanitized.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <thread>

#include <pvmm/device.hpp>
#include <pvmm/diagnostics.hpp>
#include <pvmm/reservation.hpp>
#include <pvmm/stream.hpp>
#include <pvmm/team.hpp>
#include <pvmm/team_multicast.hpp>
#include <pvmm/testing.hpp>

namespace pvmm_team_test {

using namespace std::chrono_literals;
using pvmm::errc;

namespace {

void window_case(verdict& v, std::shared_ptr<pvmm::bootstrap> b, bool per_rank_sizes, bool grow) {
  auto t = pvmm::team::create(b, team_options_for(*b));
  if (!t) return v.check(false, where(*b) + "team::create: " + t.error().message());
  const std::size_t unit = 2u << 20;
  pvmm::window_options o;
  o.size = per_rank_sizes ? unit * (1 + b->rank() % 3) : unit;
  o.max_size = 4 * unit;
  o.timeout = 20s;
  auto w = pvmm::symmetric_window::create(*t, o);
  if (!w) return v.check(false, where(*b) + "symmetric_window::create: " + w.error().message());
  const bool host = pvmm::query_backend().name == "host";
  for (int r = 0; r < b->size(); ++r) {
    const std::string peer = "rank " + std::to_string(r);
    if (t->same_node(r))
      v.check(w->mapped(r), where(*b) + peer + " on this node is not mapped: " + w->unmapped_reason(r));
    else if (host)  // no fabric handles on the host backend: reported per peer, naming why
      v.check(!w->mapped(r) && w->unmapped_reason(r).find("fabric") != std::string::npos,
              where(*b) + peer + " on another node: " + w->unmapped_reason(r));
    else
      v.check(w->mapped(r) || !w->unmapped_reason(r).empty(), where(*b) + peer + " unmapped without a reason");
    if (w->mapped(r)) v.check(w->size_of(r) >= (per_rank_sizes ? unit * (1 + r % 3) : unit), where(*b) + "size_of");
  }
  write_and_verify(v, *b, *w, 1);
  if (!grow) return;
  auto grown = w->grow(w->size_of(b->rank()) + unit, 20s);  // per-rank sizes are 1 to 3 units; max is 4
  if (!grown) return v.check(false, where(*b) + "grow: " + grown.error().message());
  write_and_verify(v, *b, *w, 2);
  // One rank asks past max_size: it is out_of_range there, and every other rank hears of it at once.
  const auto past = w->grow(b->rank() == 0 ? 5 * unit : w->size_of(b->rank()), 20s);
  v.check(b->rank() == 0
              ? past.code() == errc::out_of_range
              : past.code() == errc::out_of_range && past.error().message().find("rank 0 failed") != std::string::npos,
          where(*b) + "a grow past max_size on rank 0: " + (past ? "succeeded" : past.error().message()));
}

// A bootstrap whose rank `victim` dies by SIGKILL once `after` of its collectives (allgathers and barriers) have
// returned: 0 before the team's identities, 1 and 2 inside team::create, 3 in the window's fd ring, 4 before the
// grow, 5 in the grow's fd ring.
class dying_bootstrap : public forwarding_bootstrap {
 public:
  dying_bootstrap(std::shared_ptr<pvmm::bootstrap> inner, int victim, int after)
      : forwarding_bootstrap(std::move(inner)), victim_(victim), after_(after) {}

 private:
  pvmm::status do_allgather(const void* mine, std::size_t bytes, void* all, std::uint64_t collective,
                            pvmm::deadline until) override {
    die_if_due();
    auto done = forwarding_bootstrap::do_allgather(mine, bytes, all, collective, until);
    ++calls_;
    die_if_due();
    return done;
  }
  pvmm::status do_barrier(std::uint64_t collective, pvmm::deadline until) override {
    die_if_due();
    auto done = forwarding_bootstrap::do_barrier(collective, until);
    ++calls_;
    die_if_due();
    return done;
  }
  void die_if_due() const {
    if (rank() == victim_ && calls_ == after_) ::kill(::getpid(), SIGKILL);
  }
  int victim_, after_, calls_ = 0;
};

// The victim dies at step `after` (see dying_bootstrap); the endpoints adapter's root (rank 0) at even steps, the
// last rank at odd ones. Every survivor's first failing call is peer_lost or timeout naming the victim (MPI cannot
// say who is missing: timeout there), within its deadline, and it holds no more fds, threads or pvmm objects than
// before the team was made. Process ranks only (a thread cannot be killed alone).
void killed_case(verdict& v, std::shared_ptr<pvmm::bootstrap> inner, int after, bool names_missing) {
  const int victim = killed_victim("killed-" + std::to_string(after), inner->size());
  auto b = std::make_shared<dying_bootstrap>(inner, victim, after);
  const std::string who = where(*b);
  use_every_device_once();
  const auto fds = pvmm_test::open_fd_count();
  const auto threads = pvmm_test::live_thread_count();
  const auto live = pvmm::query_live_objects();
  // `victim_pid` (0: unknown yet): a pid the error names is the victim's (the endpoints adapter's SO_PEERCRED).
  auto expect_loss = [&](const pvmm::error& e, std::chrono::steady_clock::duration took, std::int64_t victim_pid = 0) {
    v.check(e.code == errc::peer_lost || e.code == errc::timeout,
            who + "expected peer_lost or timeout, got " + e.message());
    if (names_missing)
      v.check(e.message().find("rank " + std::to_string(victim)) != std::string::npos,
              who + "the error does not name rank " + std::to_string(victim) + ": " + e.message());
    const std::string named = "rank " + std::to_string(victim) + " (pid ";
    if (victim_pid != 0 && e.message().find(named) != std::string::npos)
      v.check(e.message().find(named + std::to_string(victim_pid) + ")") != std::string::npos,
              who + "the error names another pid than rank " + std::to_string(victim) + "'s " +
                  std::to_string(victim_pid) + ": " + e.message());
    v.check(took < 8s, who + "returned long after its 3 s deadline");
  };
  {
    pvmm::team_options o = team_options_for(*b);
    o.timeout = 3000ms;
    auto start = std::chrono::steady_clock::now();
    auto t = pvmm::team::create(b, o);
    if (!t) return expect_loss(t.error(), std::chrono::steady_clock::now() - start);
    pvmm::window_options wo;
    wo.size = 2u << 20;
    wo.max_size = 4u << 20;
    wo.timeout = 3000ms;
    start = std::chrono::steady_clock::now();
    const std::int64_t victim_pid = t->members()[victim].pid;
    auto w = pvmm::symmetric_window::create(*t, wo);
    if (!w) return expect_loss(w.error(), std::chrono::steady_clock::now() - start, victim_pid);
    start = std::chrono::steady_clock::now();
    auto grown = w->grow(4u << 20, 3000ms);
    if (!grown) return expect_loss(grown.error(), std::chrono::steady_clock::now() - start, victim_pid);
    v.check(false, who + "every step succeeded though rank " + std::to_string(victim) + " died at step " +
                       std::to_string(after));
  }
  // The bootstrap (its sockets counted above) is the caller's: it stays, broken, and holds what it held.
  const auto now = pvmm::query_live_objects();
  v.check(now.allocations == live.allocations && now.reservations == live.reservations && now.mappings == live.mappings,
          who + "allocations, reservations or mappings left after the failed window");
  const auto threads_after = pvmm_test::live_thread_count_settled(threads);
  v.check(threads_after <= threads,
          who + "threads left: " + std::to_string(threads) + " before, " + std::to_string(threads_after) + " after");
  v.check(pvmm_test::open_fd_count() <= fds,
          who + "fds: " + std::to_string(fds) + " before, " + std::to_string(pvmm_test::open_fd_count()) + " after");
}

void late_case(verdict& v, std::shared_ptr<pvmm::bootstrap> b) {
  const int missing = b->size() - 1;
  if (b->rank() == missing) {  // arrives only after everyone's deadline, then leaves
    std::this_thread::sleep_for(2500ms);
    return;
  }
  pvmm::team_options o = team_options_for(*b);
  o.timeout = 1500ms;
  const auto start = std::chrono::steady_clock::now();
  auto t = pvmm::team::create(b, o);
  const auto took = std::chrono::steady_clock::now() - start;
  v.check(!t && (t.code() == errc::timeout || t.code() == errc::peer_lost),
          where(*b) + "expected timeout, got " + (t ? "a team" : t.error().message()));
  if (!t)
    v.check(t.error().message().find("rank " + std::to_string(missing)) != std::string::npos,
            where(*b) + "the error does not name rank " + std::to_string(missing) + ": " + t.error().message());
  v.check(took < 5s, where(*b) + "returned long after the deadline");
}

void mismatch_case(verdict& v, std::shared_ptr<pvmm::bootstrap> b) {
  auto t = pvmm::team::create(b, team_options_for(*b));
  if (!t) return v.check(false, where(*b) + "team::create: " + t.error().message());
  pvmm::window_options o;
  o.size = 2u << 20;
  o.max_size = b->rank() == 1 ? 8u << 20 : 4u << 20;
  o.timeout = 20s;
  auto w = pvmm::symmetric_window::create(*t, o);
  v.check(!w && w.code() == errc::team_mismatch,
          where(*b) + "expected team_mismatch, got " + (w ? "a window" : w.error().message()));
}

// Rank 1 speaks a different team protocol: its first record (the identity record) is one byte longer, as a newer
// or older pvmm's would be. Every rank must refuse the team with team_mismatch, not read past a record.
class longer_identity : public forwarding_bootstrap {
 public:
  explicit longer_identity(std::shared_ptr<pvmm::bootstrap> inner) : forwarding_bootstrap(std::move(inner)) {}

 private:
  pvmm::status do_allgather(const void* mine, std::size_t bytes, void* all, std::uint64_t collective,
                            pvmm::deadline until) override {
    if (!first_ || rank() != 1) return forwarding_bootstrap::do_allgather(mine, bytes, all, collective, until);
    first_ = false;
    std::vector<unsigned char> longer(bytes + 1), gathered((bytes + 1) * size());
    std::memcpy(longer.data(), mine, bytes);
    return forwarding_bootstrap::do_allgather(longer.data(), bytes + 1, gathered.data(), collective, until);
  }

  bool first_ = true;
};

void version_case(verdict& v, std::shared_ptr<pvmm::bootstrap> b) {
  auto t = pvmm::team::create(std::make_shared<longer_identity>(b), team_options_for(*b));
  v.check(!t && t.code() == errc::team_mismatch,
          where(*b) + "expected team_mismatch, got " + (t ? "a team" : t.error().message()));
}

void cycles_case(verdict& v, std::shared_ptr<pvmm::bootstrap> b, int cycles, bool process_wide) {
  // One cycle first: the driver's and the transport's one-time set-up are not leaks.
  window_case(v, b, false, false);
  // Device memory is measured once every rank let go (ranks may share a device; an import keeps its exporter's),
  // and only where ranks are processes: threads share the process's counters, which the suite checks afterwards.
  const bool settled = process_wide && b->barrier(pvmm::deadline_in(20s)).has_value();
  const auto device_free = settled ? pvmm_test::device_free_bytes(team_options_for(*b).device) : std::nullopt;
  const auto fds = pvmm_test::open_fd_count();
  const auto live = pvmm::query_live_objects();
  for (int i = 0; i < cycles && v.failures.empty(); ++i) {
    auto t = pvmm::team::create(b, team_options_for(*b));
    if (!t) return v.check(false, where(*b) + "cycle " + std::to_string(i) + ": " + t.error().message());
    pvmm::window_options o;
    o.size = 2u << 20;
    auto w = pvmm::symmetric_window::create(*t, o);
    if (!w) return v.check(false, where(*b) + "cycle " + std::to_string(i) + ": " + w.error().message());
  }
  if (!process_wide) return;  // ranks are threads: the suite checks the process once they are done
  v.check(!process_wide || settled, where(*b) + "the barrier before the cycles failed");
  if (settled) {
    auto after = b->barrier(pvmm::deadline_in(20s));
    v.check(after.has_value(), where(*b) + "the barrier after the cycles: " + (after ? "" : after.error().message()));
    const auto lost =
        pvmm_test::device_memory_lost(device_free, pvmm_test::device_free_bytes(team_options_for(*b).device));
    v.check(lost.empty(), where(*b) + lost);
  }
  const auto now = pvmm::query_live_objects();
  v.check(pvmm_test::open_fd_count() == fds, where(*b) + "fds: " + std::to_string(fds) + " before, " +
                                                 std::to_string(pvmm_test::open_fd_count()) + " after");
  v.check(now.allocations == live.allocations && now.reservations == live.reservations && now.mappings == live.mappings,
          where(*b) + "live allocations, reservations or mappings changed over the cycles");
}

}  // namespace

int killed_victim(const std::string& name, int size) {
  return std::stoi(name.substr(name.find('-') + 1)) % 2 == 0 ? 0 : size - 1;
}

int dying_rank(const std::string& name, int size) {
  if (name.rfind("killed-", 0) == 0) return killed_victim(name, size);
  if (signal_case_path(name).first == "sig-killed") return size - 1;
  return -1;
}

const std::vector<std::string>& case_names() {
  static const std::vector<std::string> names{"window",  "sizes",  "grow",  "late",      "mismatch",
                                              "version", "cycles", "nodes", "multicast", "aborted"};
  return names;
}

verdict run_case(const case_params& p, std::shared_ptr<pvmm::bootstrap> ranks) {
  verdict v;
  if (p.name.rfind("sig-", 0) == 0) {
    if (!run_signal_case(v, p, std::move(ranks))) v.check(false, "no case named " + p.name);
    return v;
  }
  if (p.name.rfind("mem-", 0) == 0) {
    if (!run_mem_case(v, p, std::move(ranks))) v.check(false, "no case named " + p.name);
    return v;
  }
  if (p.name.rfind("killed-", 0) == 0) {
    killed_case(v, std::move(ranks), std::stoi(p.name.substr(7)), p.adapter_names_missing_rank);
    return v;
  }
  const bool known = run_named(p.name, {{"window", [&] { window_case(v, ranks, false, false); }},
                                        {"nodes", [&] { window_case(v, ranks, false, false); }},
                                        {"sizes", [&] { window_case(v, ranks, true, false); }},
                                        {"grow", [&] { window_case(v, ranks, true, true); }},
                                        {"late", [&] { late_case(v, ranks); }},
                                        {"mismatch", [&] { mismatch_case(v, ranks); }},
                                        {"version", [&] { version_case(v, ranks); }},
                                        {"multicast", [&] { multicast_case(v, ranks, p.one_rank_per_process); }},
                                        {"fd-short", [&] { fd_short_case(v, ranks); }},
                                        {"aborted", [&] { aborted_case(v, ranks, p.one_rank_per_process); }},
                                        {"ring-aborted", [&] { ring_aborted_case(v, ranks); }},
                                        {"cycles", [&] { cycles_case(v, ranks, p.cycles, p.one_rank_per_process); }}});
  if (!known) v.check(false, "no case named " + p.name);
  return v;
}

}  // namespace pvmm_team_test
