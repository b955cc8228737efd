// Issue 48 item 2: memory running out at every allocation of rank 0 in every team call (heap create, allocate, free;
// window create and create_from with signal pads; split) while rank 1 runs the same call: both ranks end alike, and
// where both succeeded the team stays usable alike. The sweep and operator new are memory_faults.cpp's.
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include <doctest/doctest.h>
#include <pvmm/allocation.hpp>
#include <pvmm/bootstrap.hpp>
#include <pvmm/symmetric_heap.hpp>
#include <pvmm/team.hpp>

#include "cases.hpp"
#include "memory_faults.hpp"

using namespace pvmm_fault_test;
using namespace std::chrono_literals;
using pvmm::errc;

namespace {

// One rank of the two-rank sweep below: its team and what the calls under test act on.
struct rank_state {
  pvmm::team team;
  pvmm::symmetric_heap heap;
  pvmm::symmetric_window window;
  pvmm::physical_allocation memory;
  std::size_t offset = 0;  // what the follow-up call found (a heap block's offset)
};
using team_step = std::function<pvmm::status(rank_state&, int rank)>;

pvmm::status both(const std::shared_ptr<pvmm::bootstrap> (&g)[2], rank_state (&s)[2], const team_step& prepare) {
  pvmm::status out[2];
  std::thread other([&] {
    auto t = pvmm::team::create(g[1]);
    if (!t) return void(out[1] = std::move(t).error());
    s[1].team = std::move(*t);
    out[1] = prepare(s[1], 1);
  });
  auto t = pvmm::team::create(g[0]);
  if (t) {
    s[0].team = std::move(*t);
    out[0] = prepare(s[0], 0);
  } else {
    out[0] = std::move(t).error();
  }
  other.join();
  return out[0] ? out[1] : out[0];
}

// Issue 48 item 2: rank 0's N-th allocation fails inside `call` while rank 1 runs the same call unarmed. Both ranks
// return the same outcome, with the same errc where rank 0 failed inside a bootstrap call (its abort carries the errc;
// where it failed before it could take part in the step, its abort is peer_lost), and where both succeeded the team
// stays usable alike: `after` runs on both and finds the same offset.
void sweep_two_ranks(const char* what, const team_step& prepare, const team_step& call, const team_step& after) {
  sweep(
      what,
      [&](long n) {
        auto made = pvmm::make_thread_bootstraps(2).value();
        const std::shared_ptr<pvmm::bootstrap> g[2] = {made[0], made[1]};
        rank_state s[2];
        REQUIRE(both(g, s, prepare).has_value());
        pvmm::status peer;
        std::thread other([&] { peer = call(s[1], 1); });
        const outcome o = armed(n, [&] { return call(s[0], 0); });
        const bool inside = g[0]->broken();  // rank 0 failed inside a bootstrap call (before the abort below)
        if (!o.ok) s[0].team.abort();
        other.join();
        CHECK_MESSAGE(o.ok == peer.has_value(), what << ": rank 0 " << (o.ok ? "succeeded" : "failed") << ", rank 1 "
                                                     << (peer ? std::string("succeeded") : peer.error().message()));
        if (!o.ok && !peer)
          CHECK_MESSAGE((peer.code() == o.code || (!inside && peer.code() == errc::peer_lost)),
                        what << ": rank 0 " << pvmm::to_string(o.code) << ", rank 1 " << peer.error().message());
        if (o.ok && peer) {
          pvmm::status later[2];
          std::thread t1([&] { later[1] = after(s[1], 1); });
          later[0] = after(s[0], 0);
          t1.join();
          CHECK_MESSAGE((later[0].has_value() && later[1].has_value() && s[0].offset == s[1].offset),
                        what << ": the team is not usable alike after the call");
        }
        return o;
      },
      errc::peer_lost);
}

pvmm::status heap_over(rank_state& s, int) {
  pvmm::heap_options o;
  o.size = 2u << 20;
  o.max_size = 8u << 20;
  o.timeout = 10s;
  auto h = pvmm::symmetric_heap::create(s.team, o);
  if (!h) return std::move(h).error();
  s.heap = std::move(*h);
  return {};
}

pvmm::status next_block(rank_state& s, int) {
  auto b = s.heap.allocate(1024, pvmm::symmetric_heap::min_alignment, 10s);
  if (!b) return std::move(b).error();
  s.offset = b->offset();
  return {};
}

pvmm::status nothing(rank_state&, int) { return {}; }

pvmm::status small_window(rank_state& s, int) {
  pvmm::window_options o;
  o.size = 4096;
  o.timeout = 10s;
  auto w = pvmm::symmetric_window::create(s.team, o);
  return w ? pvmm::status{} : pvmm::status(std::move(w).error());
}

}  // namespace

TEST_CASE("memory running out at any allocation of rank 0 in every team call: both ranks end alike (issue 48)") {
  if (const auto why = pvmm_team_test::no_device_reason(); !why.empty()) {
    std::printf("[pvmm-skip] %s\n", why.c_str());
    return;
  }
  sweep_two_ranks("heap create", nothing, heap_over, next_block);
  sweep_two_ranks(
      "heap allocate (growing)", heap_over,
      [](rank_state& s, int) -> pvmm::status {
        auto b = s.heap.allocate(3u << 20, pvmm::symmetric_heap::min_alignment, 10s);
        return b ? pvmm::status{} : pvmm::status(std::move(b).error());
      },
      next_block);
  sweep_two_ranks(
      "heap free",
      [](rank_state& s, int r) -> pvmm::status {
        if (auto made = heap_over(s, r); !made) return made;
        auto a = s.heap.allocate(1024, pvmm::symmetric_heap::min_alignment, 10s);
        auto b = s.heap.allocate(1024, pvmm::symmetric_heap::min_alignment, 10s);
        if (!a || !b) return wrong();
        s.offset = a->offset();
        return {};
      },
      [](rank_state& s, int) { return s.heap.free(s.offset, 10s); }, next_block);
  sweep_two_ranks(
      "window create with signal pads", nothing,
      [](rank_state& s, int) -> pvmm::status {
        pvmm::window_options o;
        o.size = 4096;
        o.signal_channels = 2;
        o.timeout = 10s;
        auto w = pvmm::symmetric_window::create(s.team, o);
        if (!w) return std::move(w).error();
        s.window = std::move(*w);
        return {};
      },
      small_window);
  sweep_two_ranks(
      "create_from with signal pads",
      [](rank_state& s, int) -> pvmm::status {
        pvmm::allocation_properties p;
        p.location = pvmm::location::device(s.team.device());
        p.exportable = pvmm::handle_types::posix_fd;
        auto m = pvmm::physical_allocation::create(2u << 20, p);
        if (!m) return std::move(m).error();
        s.memory = std::move(*m);
        return {};
      },
      [](rank_state& s, int) -> pvmm::status {
        pvmm::window_options o;
        o.signal_channels = 1;
        o.timeout = 10s;
        auto w = pvmm::symmetric_window::create_from(s.team, s.memory, o);
        if (!w) return std::move(w).error();
        s.window = std::move(*w);
        return {};
      },
      small_window);
  sweep_two_ranks(
      "split", nothing,
      [](rank_state& s, int r) -> pvmm::status {
        auto sub = s.team.split(0, r, 10s);
        if (!sub) return std::move(sub).error();
        s.team = std::move(*sub);  // the follow-up runs on the sub-team
        return {};
      },
      small_window);
}
