// Issue 48 items 4, 10, 11, 12 on thread ranks: a negative timeout on one rank is invalid_argument naming it on
// every rank, whatever the order the ranks arrive in; allocate past max_size is out_of_memory on every rank;
// create_from with signal_channels makes the pads; a bootstrap that hands one rank wrong bytes fails every rank at
// once.
#include <sys/resource.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <pvmm/allocation.hpp>
#include <pvmm/bootstrap.hpp>
#include <pvmm/device.hpp>
#include <pvmm/symmetric_heap.hpp>
#include <pvmm/team.hpp>

#include "case_support.hpp"
#include "cases.hpp"
#include "thread_ranks.hpp"

namespace {

using namespace std::chrono_literals;
using pvmm::errc;
using pvmm_team_rules::skip;

using pvmm_team_rules::thread_team_of_two;

// Runs `call(rank)` on both ranks, the rank `late` starting 100 ms after the other.
std::vector<pvmm::status> on_both(const std::function<pvmm::status(int)>& call, int late) {
  std::vector<pvmm::status> out(2);
  std::thread other([&] {
    if (late == 1) std::this_thread::sleep_for(100ms);
    out[1] = call(1);
  });
  if (late == 0) std::this_thread::sleep_for(100ms);
  out[0] = call(0);
  other.join();
  return out;
}

// The status of a result (its value dropped).
template <class T>
pvmm::status status_of(pvmm::result<T>&& r) {
  return r ? pvmm::status{} : pvmm::status(std::move(r).error());
}

// A T (symmetric_heap, symmetric_window) made with `o` on both teams together.
template <class T, class Options>
std::vector<T> made_on_both(std::vector<pvmm::team>& teams, const Options& o) {
  std::vector<T> made(2);
  on_both(
      [&](int r) {
        auto m = T::create(teams[r], o);
        if (!m) return pvmm::status(std::move(m).error());
        made[r] = std::move(*m);
        return pvmm::status{};
      },
      -1);
  return made;
}

}  // namespace

TEST_CASE("team calls: a negative timeout on rank 0 is invalid_argument naming rank 0 on every rank, either order") {
  if (skip()) return;
  for (int late = 0; late < 2; ++late) {
    CAPTURE(late);
    auto teams = thread_team_of_two();
    pvmm::heap_options o;
    o.size = 1u << 20;
    o.max_size = 4u << 20;
    o.timeout = 10s;
    auto heaps = made_on_both<pvmm::symmetric_heap>(teams, o);
    const auto timeout_of = [](int r) { return r == 0 ? -1ms : 2000ms; };
    const std::vector<std::pair<const char*, std::function<pvmm::status(int)>>> calls{
        {"heap allocate",
         [&](int r) { return status_of(heaps[r].allocate(1024, pvmm::symmetric_heap::min_alignment, timeout_of(r))); }},
        {"heap free", [&](int r) { return heaps[r].free(0, timeout_of(r)); }},
        {"split", [&](int r) { return status_of(teams[r].split(0, r, timeout_of(r))); }},
    };
    for (const auto& entry : calls) {  // no structured binding: C++17 lambdas (CAPTURE) cannot capture one
      const char* name = entry.first;
      const auto& call = entry.second;
      CAPTURE(name);
      const auto out = on_both(call, late);
      for (int r = 0; r < 2; ++r) {
        REQUIRE_FALSE(out[r].has_value());
        CHECK_MESSAGE(out[r].code() == errc::invalid_argument, out[r].error().message());
        CHECK_MESSAGE(out[r].error().message().find("rank 0") != std::string::npos, out[r].error().message());
      }
    }
    pvmm::window_options wo;
    wo.size = 1u << 20;
    wo.max_size = 4u << 20;
    wo.timeout = 10s;
    auto windows = made_on_both<pvmm::symmetric_window>(teams, wo);
    const auto grown = on_both([&](int r) { return windows[r].grow(2u << 20, timeout_of(r)); }, late);
    for (int r = 0; r < 2; ++r) {
      REQUIRE_FALSE(grown[r].has_value());
      CHECK_MESSAGE(grown[r].code() == errc::invalid_argument, grown[r].error().message());
      CHECK_MESSAGE(grown[r].error().message().find("rank 0") != std::string::npos, grown[r].error().message());
    }
  }
}

TEST_CASE(
    "heap allocate past max_size is out_of_memory on every rank, and create_from makes the signal pads asked for") {
  if (skip()) return;
  auto teams = thread_team_of_two();
  pvmm::heap_options o;
  o.size = 1u << 20;
  o.timeout = 10s;
  auto heaps = made_on_both<pvmm::symmetric_heap>(teams, o);
  const auto past =
      on_both([&](int r) { return status_of(heaps[r].allocate(heaps[r].statistics().max_size + 1)); }, -1);
  for (int r = 0; r < 2; ++r) CHECK_MESSAGE(past[r].code() == errc::out_of_memory, pvmm::to_string(past[r].code()));
  std::vector<pvmm::symmetric_window> windows(2);
  const auto made = on_both(
      [&](int r) {
        pvmm::allocation_properties p;
        p.location = pvmm::location::device(teams[r].device());
        p.exportable = pvmm::handle_types::posix_fd;
        auto m = pvmm::physical_allocation::create(pvmm::query_granularity(p).value().minimum, p);
        if (!m) return pvmm::status(std::move(m).error());
        pvmm::window_options wo;
        wo.signal_channels = 1;
        wo.timeout = 10s;
        auto w = pvmm::symmetric_window::create_from(teams[r], *m, wo);
        if (!w) return pvmm::status(std::move(w).error());
        windows[r] = std::move(*w);
        return pvmm::status{};
      },
      -1);
  for (int r = 0; r < 2; ++r) {
    REQUIRE_MESSAGE(made[r].has_value(), made[r].error().message());
    auto v = windows[r].view();
    CHECK_MESSAGE(v.has_value(), v.error().message());
    CHECK(windows[r].device_pointer_table().has_value());
  }
}

using pvmm_team_test::half_zeroed_at;

TEST_CASE("team::create over a bootstrap that hands one rank wrong bytes: every rank fails at once naming it") {
  if (skip()) return;
  auto g = pvmm::make_thread_bootstraps(4).value();
  pvmm_team_rules::every_rank_fails_naming_rank_1(
      4,
      [&](int r) {
        pvmm::team_options o;
        o.timeout = 20s;
        return status_of(pvmm::team::create(std::make_shared<half_zeroed_at>(g[r], 0), o));  // the first collective
      },
      false);
}

TEST_CASE("window create over a bootstrap that hands one rank wrong sizes: every rank fails at once naming it") {
  if (skip()) return;
  auto g = pvmm::make_thread_bootstraps(4).value();
  std::vector<std::shared_ptr<half_zeroed_at>> wrapped;
  for (auto& b : g) wrapped.push_back(std::make_shared<half_zeroed_at>(b));
  std::vector<pvmm::team> teams(4);
  {
    std::vector<std::thread> ranks;
    for (int r = 0; r < 4; ++r)
      ranks.emplace_back([&, r] {
        auto t = pvmm::team::create(wrapped[r]);
        if (t) teams[r] = std::move(*t);
      });
    for (auto& t : ranks) t.join();
  }
  for (int r = 0; r < 4; ++r) REQUIRE(teams[r].valid());
  wrapped[1]->armed_at = wrapped[1]->collectives_done();  // the window's first allgather
  pvmm_team_rules::every_rank_fails_naming_rank_1(
      4,
      [&](int r) {
        pvmm::window_options o;
        o.size = 1u << 20;
        o.timeout = 20s;
        return status_of(pvmm::symmetric_window::create(teams[r], o));
      },
      false);
}

namespace {
// Rank 1's split header announces `announced` bytes (its record is 16), and it sends none of them.
class forged_split_header : public pvmm_team_test::forwarding_bootstrap {
 public:
  using forwarding_bootstrap::forwarding_bootstrap;
  std::uint64_t announced = 512ull << 20;

 protected:
  pvmm::status do_send(int peer, int tag, const void* data, std::size_t bytes, pvmm::deadline until) override {
    if (rank() != 1 || tag < pvmm::team::split_tag_first)
      return forwarding_bootstrap::do_send(peer, tag, data, bytes, until);
    if (bytes != 184) return {};  // the record itself: never sent (the header said more)
    unsigned char header[184];
    std::memcpy(header, data, bytes);
    std::memcpy(header + 16, &announced, sizeof announced);  // split_header::bytes
    return forwarding_bootstrap::do_send(peer, tag, header, bytes, until);
  }
};

long max_rss_kib() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}
}  // namespace

TEST_CASE("split: a member announcing 512 MiB costs the sub-team root no allocation of that size (item 5)") {
  if (skip()) return;
  auto g = pvmm::make_thread_bootstraps(2).value();
  std::vector<pvmm::team> teams(2);
  {
    std::vector<std::thread> ranks;
    for (int r = 0; r < 2; ++r)
      ranks.emplace_back([&, r] {
        auto t = pvmm::team::create(std::make_shared<forged_split_header>(g[r]));
        if (t) teams[r] = std::move(*t);
      });
    for (auto& t : ranks) t.join();
  }
  REQUIRE(teams[0].valid());
  REQUIRE(teams[1].valid());
  const long before = max_rss_kib();
  std::vector<pvmm::status> out(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      auto sub = teams[r].split(0, r, 1500ms);
      out[r] = sub ? pvmm::status{} : pvmm::status(std::move(sub).error());
    });
  for (auto& t : ranks) t.join();
  CHECK_FALSE(out[0].has_value());
  CHECK_FALSE(out[1].has_value());
  CHECK_MESSAGE(max_rss_kib() - before < 64 * 1024, "the root's peak grew by " << (max_rss_kib() - before) << " KiB");
}
