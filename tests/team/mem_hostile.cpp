// create_from against a forged peer (issue 35): a rank whose request lies about its memory is protocol_error
// naming it on every rank, at once. Ranks are threads; rank 1's bootstrap forges what it sends.
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

#include <doctest/doctest.h>
#include <pvmm/allocation.hpp>
#include <pvmm/diagnostics.hpp>
#include <pvmm/team.hpp>

#include "case_support.hpp"
#include "cases.hpp"
#include "open_fds.hpp"
#include "team/team_exchange.hpp"
#include "team/window_state.hpp"

namespace {

using namespace std::chrono_literals;
using pvmm::errc;

// Rank 1's from_request records pass through `forge` on their way out (what it keeps for itself is the truth).
class forging_request : public pvmm_team_test::forwarding_bootstrap {
 public:
  using record = pvmm::detail::enveloped<pvmm::detail::from_request>;
  forging_request(std::shared_ptr<pvmm::bootstrap> inner, std::function<void(pvmm::detail::from_request&)> forge)
      : forwarding_bootstrap(std::move(inner)), forge_(std::move(forge)) {}
  pvmm::status do_allgather(const void* mine, std::size_t bytes, void* all, std::uint64_t collective,
                            pvmm::deadline until) override {
    if (bytes != sizeof(record)) return forwarding_bootstrap::do_allgather(mine, bytes, all, collective, until);
    record sent;
    std::memcpy(&sent, mine, sizeof sent);
    forge_(sent.body);
    return forwarding_bootstrap::do_allgather(&sent, bytes, all, collective, until);
  }

 private:
  std::function<void(pvmm::detail::from_request&)> forge_;
};

void expect_forger_named(std::function<void(pvmm::detail::from_request&)> forge) {
  const auto why = pvmm_team_test::no_device_reason();
  if (!why.empty()) {
    std::printf("[pvmm-skip] %s\n", why.c_str());
    return;
  }
  pvmm_team_test::use_every_device_once();
  const std::size_t fds = pvmm_test::open_fd_count();
  const auto live = pvmm::query_live_objects();
  {
    constexpr int n = 3;
    auto ranks = pvmm::make_thread_bootstraps(n);
    REQUIRE(ranks);
    std::vector<std::string> failures(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        std::shared_ptr<pvmm::bootstrap> b = (*ranks)[r];
        if (r == 1) b = std::make_shared<forging_request>(b, forge);
        auto t = pvmm::team::create(b, pvmm_team_test::team_options_for(*b));
        if (!t) return void(failures[r] = "team::create: " + t.error().message());
        pvmm::allocation_properties p;
        p.location = pvmm::location::device(t->device());
        p.exportable = pvmm::handle_types::posix_fd;
        auto a = pvmm::physical_allocation::create(2u << 20, p);
        if (!a) return void(failures[r] = "allocation: " + a.error().message());
        pvmm::window_options o;
        o.max_size = 8u << 20;
        o.timeout = 20s;
        const auto start = std::chrono::steady_clock::now();
        auto w = pvmm::symmetric_window::create_from(*t, *a, o);
        const auto took = std::chrono::steady_clock::now() - start;
        if (w || w.code() != errc::protocol_error || w.error().message().find("rank 1") == std::string::npos)
          failures[r] = "expected protocol_error naming rank 1, got " + (w ? "a window" : w.error().message());
        else if (took > 5s)
          failures[r] = "the refusal took as long as a timeout";
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r) CHECK_MESSAGE(failures[r].empty(), "rank " << r << ": " << failures[r]);
  }
  const auto now = pvmm::query_live_objects();
  CHECK_MESSAGE(pvmm_test::open_fd_count() == fds, "file descriptors leaked");
  CHECK_MESSAGE(
      (now.allocations == live.allocations && now.reservations == live.reservations && now.mappings == live.mappings),
      "pvmm objects leaked");
}

}  // namespace

TEST_SUITE("team") {
  TEST_CASE("threads: create_from, a rank announcing more chunks than its bytes hold is protocol_error on every rank") {
    expect_forger_named([](pvmm::detail::from_request& q) { q.chunks = 1000; });
  }
  TEST_CASE("threads: create_from, a rank announcing more bytes than it maps is protocol_error on every rank") {
    expect_forger_named([](pvmm::detail::from_request& q) { q.size *= 2; });
  }
}
