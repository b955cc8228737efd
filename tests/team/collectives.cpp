// pvmm/team_collectives.hpp in host code (issue 51 item 4): four thread ranks on the host backend, each calling the
// collectives on its window's view from its own thread, for counts that do and do not divide by the ranks; every
// element checked, every call bounded, and the slots rewritten after each call without a peer reading stale data.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <pvmm/device.hpp>
#include <pvmm/diagnostics.hpp>
#include <pvmm/team.hpp>
#include <pvmm/team_collectives.hpp>

using namespace std::chrono_literals;

namespace {

constexpr int ranks = 4;
constexpr std::uint64_t timeout_ns = 20000000000;  // 20 s: a lost rank fails the call, never hangs it
constexpr std::size_t most = 100003;               // elements: odd, so chunks differ by one

// Rank r's operand element i: distinct per rank and element, exact in float.
float operand(int r, std::size_t i) { return static_cast<float>((r + 1) * 1000 + static_cast<int>(i % 997)); }
float sum_of(std::size_t i) {
  float s = 0;
  for (int r = 0; r < ranks; ++r) s += operand(r, i);
  return s;
}

// Runs `body(rank, view, window)` on one thread per rank of a host-backend team with a window of `most` floats.
template <class Body>
void on_every_rank(Body body) {
  auto group = pvmm::make_thread_bootstraps(ranks).value();
  std::vector<std::string> failed(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      auto team = pvmm::team::create(group[r]);
      if (!team) return void(failed[r] = team.error().message());
      pvmm::window_options o;
      o.size = most * sizeof(float);
      o.signal_channels = 2;
      o.timeout = 20s;
      auto window = pvmm::symmetric_window::create(*team, o);
      if (!window) return void(failed[r] = window.error().message());
      auto view = window->view();
      if (!view) return void(failed[r] = view.error().message());
      failed[r] = body(r, *view, *window);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < ranks; ++r) CHECK_MESSAGE(failed[r].empty(), "rank " << r << ": " << failed[r]);
}

void fill(const pvmm::symmetric_window& w, int r, std::size_t count) {
  auto* mine = static_cast<float*>(w.local());
  for (std::size_t i = 0; i < count; ++i) mine[i] = operand(r, i);
}

std::string check(const float* got, std::size_t begin, std::size_t end, const char* what) {
  for (std::size_t i = begin; i < end; ++i)
    if (got[i] != sum_of(i))
      return std::string(what) + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) + ", not " +
             std::to_string(sum_of(i));
  return {};
}

}  // namespace

TEST_CASE("collectives: one-shot and two-shot all-reduce, reduce-scatter and all-gather sum every element") {
  if (pvmm::query_backend().name != "host") {
    std::printf("[pvmm-skip] the collectives run in host code on the host backend's windows; on %s they are kernels\n",
                pvmm::query_backend().name.c_str());
    return;
  }
  on_every_rank([](int r, const pvmm::window_view& v, const pvmm::symmetric_window& w) -> std::string {
    const pvmm::block_scope block{};
    for (std::size_t count : {std::size_t{1}, std::size_t{3}, std::size_t{4097}, most}) {
      const std::string at = " (count " + std::to_string(count) + ")";
      std::vector<float> out(count, -1.0f);
      fill(w, r, count);
      if (!pvmm::one_shot_all_reduce_sum<float>(block, v, 0, count, out.data(), 0, timeout_ns))
        return "one-shot expired" + at;
      if (auto bad = check(out.data(), 0, count, "one-shot"); !bad.empty()) return bad + at;
      fill(w, r, count);  // the closing barrier: no peer reads the old operand any more
      if (!pvmm::reduce_scatter_sum<float>(block, v, 0, count, 1, timeout_ns)) return "reduce-scatter expired" + at;
      const auto* mine = static_cast<const float*>(w.local());
      const std::size_t b = pvmm::chunk_begin(count, r, ranks), e = pvmm::chunk_begin(count, r + 1, ranks);
      if (auto bad = check(mine, b, e, "reduce-scatter"); !bad.empty()) return bad + at;
      if (!pvmm::all_gather<float>(block, v, 0, count, 1, timeout_ns)) return "all-gather expired" + at;
      if (auto bad = check(mine, 0, count, "all-gather after reduce-scatter"); !bad.empty()) return bad + at;
      fill(w, r, count);
      if (!pvmm::two_shot_all_reduce_sum<float>(pvmm::warp_scope{}, v, 0, count, 0, timeout_ns))
        return "two-shot expired" + at;
      if (auto bad = check(mine, 0, count, "two-shot"); !bad.empty()) return bad + at;
      for (std::size_t one_shot_bytes : {std::size_t{0}, std::size_t{1} << 30}) {  // each path of the choice
        fill(w, r, count);
        std::fill(out.begin(), out.end(), -1.0f);
        if (!pvmm::all_reduce_sum<float>(block, v, 0, count, out.data(), 1, timeout_ns, one_shot_bytes))
          return "all_reduce_sum expired" + at;
        if (auto bad = check(out.data(), 0, count, "all_reduce_sum"); !bad.empty()) return bad + at;
      }
    }
    if (auto st = w.signal_status(); !st) return st.error().message();
    return {};
  });
}

TEST_CASE("collectives: chunks cover the count once, in rank order") {
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{8}, most})
    for (int n : {1, 2, 3, 4, 7}) {
      CAPTURE(count);
      CAPTURE(n);
      CHECK(pvmm::chunk_begin(count, 0, n) == 0);
      CHECK(pvmm::chunk_begin(count, n, n) == count);
      for (int r = 0; r < n; ++r) {
        const std::size_t size = pvmm::chunk_begin(count, r + 1, n) - pvmm::chunk_begin(count, r, n);
        CHECK(size >= count / static_cast<std::size_t>(n));
        CHECK(size <= count / static_cast<std::size_t>(n) + 1);
      }
    }
}
