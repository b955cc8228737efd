// What the doctest team cases on thread ranks share (suite.cpp, team_rules.cpp, team_rules_closing.cpp,
// endpoint_strangers.cpp): the skip where there is no device, a team of two thread ranks, and the check that a
// collective fails on every rank at once, naming the rank that got wrong bytes.
#pragma once

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <pvmm/bootstrap.hpp>
#include <pvmm/diagnostics.hpp>
#include <pvmm/error.hpp>
#include <pvmm/team.hpp>

#include "cases.hpp"
#include "open_fds.hpp"

namespace pvmm_team_rules {

/// Nothing a case leaves behind: fds and live allocations, reservations and mappings as at construction (declared
/// after any warm-up that opens files for the process's life).
struct leak_check {
  std::size_t fds = pvmm_test::open_fd_count();
  pvmm::live_objects live = pvmm::query_live_objects();
  ~leak_check() {
    const auto now = pvmm::query_live_objects();
    CHECK_MESSAGE(pvmm_test::open_fd_count() == fds, "file descriptors leaked");
    CHECK_MESSAGE(now.allocations == live.allocations, "allocations leaked");
    CHECK_MESSAGE(now.reservations == live.reservations, "reservations leaked");
    CHECK_MESSAGE(now.mappings == live.mappings, "mappings leaked");
  }
};

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

/// Runs body(bootstrap, rank) on `ranks` thread ranks of one group at once: each gives "" where its rank passed,
/// else why not (checked empty for every rank).
inline void every_thread_rank_passes(
    int ranks, const std::function<std::string(const std::shared_ptr<pvmm::bootstrap>&, int)>& body) {
  auto made = pvmm::make_thread_bootstraps(ranks);
  REQUIRE(made);
  std::vector<std::string> failures(static_cast<std::size_t>(ranks));
  on_thread_ranks(ranks, [&](int r) { failures[r] = body((*made)[r], r); });
  for (const auto& f : failures) CHECK_MESSAGE(f.empty(), f);
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
