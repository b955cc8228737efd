// The split cases (issue 35 item 6; cases.hpp): team::split into odd and even ranks with windows and a heap on the
// sub-teams; a sub-team whose rank 0 gives up; a rank gone before a split.
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <pvmm/allocation.hpp>
#include <pvmm/device.hpp>
#include <pvmm/symmetric_heap.hpp>
#include <pvmm/team.hpp>

#include "case_support.hpp"
#include "cases.hpp"

namespace pvmm_team_test {

using namespace std::chrono_literals;
using pvmm::errc;

namespace {

constexpr std::size_t split_unit = 2u << 20;  // bytes of each window and heap slot

// split into odd and even ranks (ranked by descending parent rank: key = -rank), a window on each sub-team with its
// data read back by the sub-team's members; a split leaving rank 0 out (an empty team); then the parent team's
// collectives still work (the sub-teams' messages did not disturb them).
void split_case(verdict& v, std::shared_ptr<pvmm::bootstrap> b) {
  auto t = pvmm::team::create(b, team_options_for(*b));
  if (!t) return v.check(false, where(*b) + "team::create: " + t.error().message());
  const int n = b->size(), me = b->rank();
  {
    auto sub = t->split(me % 2, -me, 20s);
    if (!sub) return v.check(false, where(*b) + "split: " + sub.error().message());
    int expected_size = 0, expected_rank = 0;
    for (int r = 0; r < n; ++r)
      if (r % 2 == me % 2) {
        ++expected_size;
        if (r > me) ++expected_rank;
      }
    v.check(sub->size() == expected_size && sub->rank() == expected_rank && sub->ranks().rank() == expected_rank,
            where(*b) + "sub-team rank " + std::to_string(sub->rank()) + " of " + std::to_string(sub->size()) +
                ", expected " + std::to_string(expected_rank) + " of " + std::to_string(expected_size));
    pvmm::window_options o;
    o.size = split_unit;
    o.timeout = 20s;
    auto w = pvmm::symmetric_window::create(*sub, o);
    if (!w) return v.check(false, where(*b) + "window on the sub-team: " + w.error().message());
    v.check(w->size() == expected_size, where(*b) + "the sub-team's window has another size");
    write_and_verify(v, sub->ranks(), *w, 5);
    // A split of the sub-team (every member the same color): its collectives travel through the sub-team's
    // bootstrap to the parent's, on the next depth's tags, while the sub-team's window stays mapped.
    auto nested = sub->split(0, 0, 20s);
    if (!nested) return v.check(false, where(*b) + "nested split: " + nested.error().message());
    v.check(nested->size() == sub->size() && nested->rank() == sub->rank(), where(*b) + "the nested sub-team");
    auto nw = pvmm::symmetric_window::create(*nested, o);
    if (!nw) return v.check(false, where(*b) + "window on the nested sub-team: " + nw.error().message());
    write_and_verify(v, nested->ranks(), *nw, 9);
    write_and_verify(v, sub->ranks(), *w, 10);
  }
  {
    auto rest = t->split(me == 0 ? pvmm::team::no_color : 7, 0, 20s);
    if (!rest) return v.check(false, where(*b) + "split leaving rank 0 out: " + rest.error().message());
    v.check(me == 0 ? !rest->valid() : rest->valid() && rest->size() == n - 1 && rest->rank() == me - 1,
            where(*b) + "the split leaving rank 0 out");
    if (me != 0 && rest->valid()) {
      pvmm::heap_options ho;
      ho.size = split_unit;
      ho.timeout = 20s;
      auto h = pvmm::symmetric_heap::create(*rest, ho);
      if (!h) return v.check(false, where(*b) + "heap on the sub-team: " + h.error().message());
      auto blk = h->allocate(4096, 256, 20s);
      if (!blk) return v.check(false, where(*b) + "heap allocate on the sub-team: " + blk.error().message());
      write_then_read_all(v, rest->ranks(), blk->local(), 4096, 6, [&](int r) { return blk->peer(r); });
    }
  }
  pvmm::window_options o;
  o.size = split_unit;
  o.timeout = 20s;
  auto w = pvmm::symmetric_window::create(*t, o);
  if (!w) return v.check(false, where(*b) + "window on the parent after the splits: " + w.error().message());
  write_and_verify(v, *b, *w, 8);
}

// After a split, sub-team rank 0 of the odd ranks (parent rank 1) gives up instead of making a window: every other
// odd rank's window create fails with peer_lost or timeout within its deadline; the even ranks return within theirs.
void split_lost_case(verdict& v, std::shared_ptr<pvmm::bootstrap> b) {
  auto t = pvmm::team::create(b, team_options_for(*b));
  if (!t) return v.check(false, where(*b) + "team::create: " + t.error().message());
  const int me = b->rank();
  auto sub = t->split(me % 2, me, 20s);
  if (!sub) return v.check(false, where(*b) + "split: " + sub.error().message());
  auto settled = b->barrier(pvmm::deadline_in(20s));  // every split returned before rank 1 gives up
  if (!settled) return v.check(false, where(*b) + "barrier after the split: " + settled.error().message());
  if (me == 1) return sub->abort();
  pvmm::window_options o;
  o.size = split_unit;
  o.timeout = 1000ms;
  const auto start = std::chrono::steady_clock::now();
  auto w = pvmm::symmetric_window::create(*sub, o);
  const auto took = std::chrono::steady_clock::now() - start;
  v.check(took < 6s, where(*b) + "the window create returned long after its 1 s deadline");
  if (me % 2 == 1)
    v.check(!w && (w.code() == errc::peer_lost || w.code() == errc::timeout),
            where(*b) + "expected peer_lost or timeout, got " + (w ? "a window" : w.error().message()));
}

// The last rank is gone before the split: a process exits (as if killed; it reports success, the others are
// checked), a thread returns without calling it. Every other rank's split fails within its deadline with
// peer_lost or timeout, naming the rank where the adapter can know it.
void split_dead_case(verdict& v, std::shared_ptr<pvmm::bootstrap> b, const case_params& p) {
  auto t = pvmm::team::create(b, team_options_for(*b));
  if (!t) return v.check(false, where(*b) + "team::create: " + t.error().message());
  const int gone = b->size() - 1;
  if (b->rank() == gone) {
    if (p.one_rank_per_process) {
      std::fflush(stdout);
      ::_exit(0);
    }
    return;  // a thread: it never calls split
  }
  const auto start = std::chrono::steady_clock::now();
  auto sub = t->split(b->rank() % 2, 0, 1000ms);
  const auto took = std::chrono::steady_clock::now() - start;
  v.check(!sub && (sub.code() == errc::peer_lost || sub.code() == errc::timeout),
          where(*b) + "expected peer_lost or timeout, got " + (sub ? "a team" : sub.error().message()));
  if (!sub && p.adapter_names_missing_rank)
    v.check(sub.error().message().find("rank " + std::to_string(gone)) != std::string::npos,
            where(*b) + "the error does not name rank " + std::to_string(gone) + ": " + sub.error().message());
  v.check(took < 5s, where(*b) + "the split returned long after its 1 s deadline");
}

}  // namespace

bool run_split_body(verdict& v, const case_params& p, const std::shared_ptr<pvmm::bootstrap>& ranks) {
  if (p.name == "mem-split")
    split_case(v, ranks);
  else if (p.name == "mem-split-dead")
    split_dead_case(v, ranks, p);
  else if (p.name == "mem-split-lost")
    split_lost_case(v, ranks);
  else
    return false;
  return true;
}

}  // namespace pvmm_team_test
