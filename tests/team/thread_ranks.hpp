// What the doctest team cases on thread ranks share (suite.cpp, team_rules.cpp, team_rules_closing.cpp,
// endpoint_strangers.cpp): the skip where there is no device, a team of two thread ranks, and the check that a
// collective fails on every rank at once, naming the rank that got wrong bytes.
#pragma once

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <pvmm/bootstrap.hpp>
#include <pvmm/error.hpp>
#include <pvmm/team.hpp>

#include "cases.hpp"

namespace pvmm_team_rules {

/// Prints "[pvmm-skip] why" and says so where there is no device to make teams on.
inline bool skip() {
  if (const auto why = pvmm_team_test::no_device_reason(); !why.empty()) {
    std::printf("[pvmm-skip] %s\n", why.c_str());
    return true;
  }
  return false;
}

/// Runs f(rank) on `ranks` threads at once and waits for them.
inline void on_thread_ranks(int ranks, const std::function<void(int)>& f) {
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) threads.emplace_back(f, r);
  for (auto& t : threads) t.join();
}

/// A team of two thread ranks (both made, or the case stops).
inline std::vector<pvmm::team> thread_team_of_two() {
  auto ranks = pvmm::make_thread_bootstraps(2);
  REQUIRE(ranks);
  std::vector<pvmm::team> teams(2);
  on_thread_ranks(2, [&](int r) {
    if (auto t = pvmm::team::create((*ranks)[r])) teams[r] = std::move(*t);
  });
  REQUIRE(teams[0].valid());
  REQUIRE(teams[1].valid());
  return teams;
}

/// Runs call(rank) on `ranks` thread ranks at once: every rank fails within 5 s (with rank 1's errc where `alike`),
/// each but rank 1 naming rank 1.
inline void every_rank_fails_naming_rank_1(int ranks, const std::function<pvmm::status(int)>& call, bool alike) {
  using namespace std::chrono_literals;
  std::vector<pvmm::status> out(static_cast<std::size_t>(ranks));
  std::vector<std::chrono::steady_clock::duration> took(static_cast<std::size_t>(ranks));
  on_thread_ranks(ranks, [&](int r) {
    const auto start = std::chrono::steady_clock::now();
    out[r] = call(r);
    took[r] = std::chrono::steady_clock::now() - start;
  });
  for (int r = 0; r < ranks; ++r) {
    CAPTURE(r);
    REQUIRE_FALSE(out[r].has_value());
    CHECK(took[r] < 5s);
    if (alike) CHECK_MESSAGE(out[r].code() == out[1].code(), out[r].error().message());
    if (r != 1) CHECK_MESSAGE(out[r].error().message().find("rank 1") != std::string::npos, out[r].error().message());
  }
}

}  // namespace pvmm_team_rules
