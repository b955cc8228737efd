// unmapped_reason() read on one thread while steps give peers up on another (the threading contract: a window's
// accessors from any thread). A slot given up keeps its first reason and is read under the lock that guards it;
// before, every grow rewrote the reason of an unreachable peer while a reader could be copying it (a data race:
// ThreadSanitizer reported it in the host-tsan preset's run of this case).
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <pvmm/team.hpp>

#include "cases.hpp"

using namespace std::chrono_literals;

TEST_CASE("an unreachable peer's unmapped_reason is read while grows give it up again: one reason, no race") {
  if (const auto why = pvmm_team_test::no_device_reason(); !why.empty()) {
    std::printf("[pvmm-skip] %s\n", why.c_str());
    return;
  }
  auto ranks = pvmm::make_thread_bootstraps(2, {0, 1});  // two simulated nodes: the peer is reached by fabric only
  REQUIRE(ranks);
  std::vector<std::string> bad(2);
  std::vector<std::string> first(2), last(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      auto t = pvmm::team::create((*ranks)[r]);
      if (!t) return void(bad[r] = "team::create: " + t.error().message());
      pvmm::window_options o;
      o.size = 2u << 20;
      o.max_size = 16u << 20;
      o.timeout = 20s;
      auto w = pvmm::symmetric_window::create(*t, o);
      if (!w) return void(bad[r] = "create: " + w.error().message());
      if (w->mapped(1 - r)) return void(bad[r] = "the peer on another node is mapped: this backend has fabric");
      first[r] = w->unmapped_reason(1 - r);
      std::atomic<bool> done{false};
      std::thread reader([&] {
        while (!done.load())
          if (w->unmapped_reason(1 - r).empty()) bad[r] = "an unmapped peer's reason read empty";
      });
      for (int g = 2; g <= 8 && bad[r].empty(); g += 2)
        if (auto grown = w->grow(static_cast<std::size_t>(g) << 20, 20s); !grown)
          bad[r] = "grow: " + grown.error().message();
      done = true;
      reader.join();
      last[r] = w->unmapped_reason(1 - r);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    if (bad[r].find("has fabric") != std::string::npos) {
      std::printf("[pvmm-skip] %s\n", bad[r].c_str());
      return;
    }
    CHECK_MESSAGE(bad[r].empty(), bad[r]);
    CHECK_MESSAGE(!first[r].empty(), "rank " << r);
    CHECK_MESSAGE(last[r] == first[r], last[r]);
  }
}
