// Issue 48 item 12, the steps whose data exchange had no later agreement: a bootstrap that hands one rank wrong
// bytes in a heap request's allgather (allocate, free), in split's colors or in create_from's memory records makes
// every rank fail at once with that rank's errc, naming it (docs/design.md invariant 33), rather than leaving the
// others to succeed or wait. The same for team_multicast::create's capability allgather.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <pvmm/allocation.hpp>
#include <pvmm/bootstrap.hpp>
#include <pvmm/device.hpp>
#include <pvmm/symmetric_heap.hpp>
#include <pvmm/team.hpp>
#include <pvmm/team_multicast.hpp>

#include "case_support.hpp"
#include "cases.hpp"
#include "thread_ranks.hpp"

namespace {

using namespace std::chrono_literals;

using pvmm_team_test::half_zeroed_at;

constexpr int ranks_n = 4;

struct fixture {
  std::vector<std::shared_ptr<half_zeroed_at>> wrapped;
  std::vector<pvmm::team> teams = std::vector<pvmm::team>(ranks_n);

  fixture() {
    auto g = pvmm::make_thread_bootstraps(ranks_n).value();
    for (auto& b : g) wrapped.push_back(std::make_shared<half_zeroed_at>(b));
    on_all([&](int r) {
      auto t = pvmm::team::create(wrapped[r]);
      if (!t) return pvmm::status(std::move(t).error());
      teams[r] = std::move(*t);
      return pvmm::status{};
    });
  }

  // Runs `call(rank)` on every rank at once; each rank's outcome.
  static std::vector<pvmm::status> on_all(const std::function<pvmm::status(int)>& call) {
    std::vector<pvmm::status> out(ranks_n);
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks_n; ++r) threads.emplace_back([&, r] { out[r] = call(r); });
    for (auto& t : threads) t.join();
    return out;
  }

  // Arms rank 1's next collective, runs `call` on every rank, and checks every rank failed at once, alike, naming
  // rank 1.
  void check_every_rank_fails(const std::function<pvmm::status(int)>& call) {
    wrapped[1]->armed_at = wrapped[1]->collectives_done();
    pvmm_team_rules::every_rank_fails_naming_rank_1(ranks_n, call, true);
  }
};

using pvmm_team_rules::skip;

std::vector<pvmm::symmetric_heap> make_heaps(fixture& f) {
  std::vector<pvmm::symmetric_heap> heaps(ranks_n);
  const auto made = fixture::on_all([&](int r) {
    pvmm::heap_options o;
    o.size = 1u << 20;
    auto h = pvmm::symmetric_heap::create(f.teams[r], o);
    if (!h) return pvmm::status(std::move(h).error());
    heaps[r] = std::move(*h);
    return pvmm::status{};
  });
  for (int r = 0; r < ranks_n; ++r) REQUIRE_MESSAGE(made[r].has_value(), made[r].error().message());
  return heaps;
}

}  // namespace

TEST_CASE("heap allocate over a bootstrap that hands one rank wrong bytes: every rank fails at once naming it") {
  if (skip()) return;
  fixture f;
  for (auto& t : f.teams) REQUIRE(t.valid());
  auto heaps = make_heaps(f);
  f.check_every_rank_fails([&](int r) {
    auto b = heaps[r].allocate(4096, pvmm::symmetric_heap::min_alignment, 20s);
    return b ? pvmm::status{} : pvmm::status(std::move(b).error());
  });
}

TEST_CASE("heap free over a bootstrap that hands one rank wrong bytes: every rank fails at once naming it") {
  if (skip()) return;
  fixture f;
  for (auto& t : f.teams) REQUIRE(t.valid());
  auto heaps = make_heaps(f);
  std::vector<std::size_t> offsets(ranks_n);
  const auto allocated = fixture::on_all([&](int r) {
    auto b = heaps[r].allocate(4096);
    if (!b) return pvmm::status(std::move(b).error());
    offsets[r] = b->offset();
    return pvmm::status{};
  });
  for (int r = 0; r < ranks_n; ++r) REQUIRE_MESSAGE(allocated[r].has_value(), allocated[r].error().message());
  f.check_every_rank_fails([&](int r) { return heaps[r].free(offsets[r], 20s); });
}

TEST_CASE("split over a bootstrap that hands one rank wrong colors: every rank fails at once naming it") {
  if (skip()) return;
  fixture f;
  for (auto& t : f.teams) REQUIRE(t.valid());
  f.check_every_rank_fails([&](int r) {
    auto sub = f.teams[r].split(r % 2, r, 20s);
    return sub ? pvmm::status{} : pvmm::status(std::move(sub).error());
  });
}

TEST_CASE("create_from over a bootstrap that hands one rank wrong records: every rank fails at once naming it") {
  if (skip()) return;
  fixture f;
  for (auto& t : f.teams) REQUIRE(t.valid());
  std::vector<pvmm::physical_allocation> memory;
  for (int r = 0; r < ranks_n; ++r) {
    pvmm::allocation_properties p;
    p.location = pvmm::location::device(f.teams[r].device());
    p.exportable = pvmm::handle_types::posix_fd;
    auto m = pvmm::physical_allocation::create(pvmm::query_granularity(p).value().minimum, p);
    REQUIRE_MESSAGE(m.has_value(), m.error().message());
    memory.push_back(std::move(*m));
  }
  f.check_every_rank_fails([&](int r) {
    pvmm::window_options o;
    o.timeout = 20s;
    auto w = pvmm::symmetric_window::create_from(f.teams[r], memory[r], o);
    return w ? pvmm::status{} : pvmm::status(std::move(w).error());
  });
}

// Multicast's capability allgather: rank 1 receives wrong records while the others read "not supported" (host) or
// the real capabilities; every rank fails at once with rank 1's errc, naming it, rather than rank 1 alone. No
// multicast object is created on any rank (the step fails before step 2).
TEST_CASE("team_multicast over a bootstrap that hands one rank wrong capabilities: every rank fails naming it") {
  if (skip()) return;
  fixture f;
  for (auto& t : f.teams) REQUIRE(t.valid());
  std::vector<pvmm::symmetric_window> windows(ranks_n);
  const auto made = fixture::on_all([&](int r) {
    pvmm::window_options o;
    o.size = 2u << 20;
    o.timeout = 20s;
    auto w = pvmm::symmetric_window::create(f.teams[r], o);
    if (!w) return pvmm::status(std::move(w).error());
    windows[r] = std::move(*w);
    return pvmm::status{};
  });
  for (int r = 0; r < ranks_n; ++r) REQUIRE_MESSAGE(made[r].has_value(), made[r].error().message());
  f.check_every_rank_fails([&](int r) {
    auto m = pvmm::team_multicast::create(windows[r], {20s});
    return m ? pvmm::status{} : pvmm::status(std::move(m).error());
  });
}
