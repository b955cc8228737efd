// The traces pvmm-bench traces replays (trace_gen.hpp): every family well formed at the bench's scale and CI's, the
// same trace from the same seed, another from another seed, and each family doing what its comment says.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "trace_gen.hpp"

namespace tg = bench::tracegen;

namespace {
bool same(const tg::trace& a, const tg::trace& b) {
  if (a.name != b.name || a.ids != b.ids || a.peak_live != b.peak_live || a.checkpoints != b.checkpoints ||
      a.ops.size() != b.ops.size())
    return false;
  for (std::size_t i = 0; i < a.ops.size(); ++i) {
    const auto &x = a.ops[i], &y = b.ops[i];
    if (x.alloc != y.alloc || x.stream != y.stream || x.id != y.id || x.size != y.size) return false;
  }
  return true;
}
std::size_t distinct_sizes(const tg::trace& t) {
  std::set<std::size_t> sizes;
  for (auto& o : t.ops)
    if (o.alloc) sizes.insert(o.size);
  return sizes.size();
}
}  // namespace

TEST_CASE("every trace is well formed at scale 1 and at CI's 0.004, and the list names seven distinct traces") {
  for (double scale : {1.0, 0.004}) {
    const auto all = tg::all(scale);
    REQUIRE(all.size() == 7);
    std::set<std::string> names;
    for (const auto& t : all) {
      INFO(t.name << " at scale " << scale);
      CHECK(tg::check(t) == "");
      CHECK(t.ids > 1000);
      CHECK(t.ops.size() == 2 * std::size_t(t.ids));
      names.insert(t.name);
    }
    CHECK(names.size() == 7);
  }
}

TEST_CASE("the same seed gives the same trace, another seed another") {
  CHECK(same(tg::moe(5, 1), tg::moe(5, 1)));
  CHECK(same(tg::recompute(6, 1), tg::recompute(6, 1)));
  CHECK(same(tg::kv_cache(7, 1), tg::kv_cache(7, 1)));
  CHECK(same(tg::transformer(true, 2, 1), tg::transformer(true, 2, 1)));
  CHECK_FALSE(same(tg::moe(5, 1), tg::moe(50, 1)));
  CHECK_FALSE(same(tg::recompute(6, 1), tg::recompute(60, 1)));
  CHECK_FALSE(same(tg::kv_cache(7, 1), tg::kv_cache(70, 1)));
}

TEST_CASE("the new families stress what their comments say") {
  const double gib = double(1 << 30);
  SUBCASE("moe: many distinct expert sizes, dispatched tokens allocated on the second stream, freed on compute") {
    const auto t = tg::moe(5, 1);
    CHECK(distinct_sizes(t) > 500);
    std::vector<int> home(t.ids, -1);
    int crossed = 0;
    for (auto& o : t.ops) {
      if (o.alloc) home[o.id] = o.stream;
      crossed += !o.alloc && home[o.id] == 1 && o.stream == 0;
    }
    CHECK(crossed == 2 * 4 * 3);  // forward and backward, 4 layers, 3 steps
    CHECK(double(t.peak_live) / gib > 1.0);
    CHECK(double(t.peak_live) / gib < 16.0);
  }
  SUBCASE("recompute: blocks of 128 MiB and more, most of them freed within a layer's few operations") {
    const auto t = tg::recompute(6, 1);
    std::vector<std::size_t> born(t.ids, 0), size(t.ids, 0);
    int large = 0, short_lived = 0;
    for (std::size_t i = 0; i < t.ops.size(); ++i) {
      const auto& o = t.ops[i];
      if (o.alloc) {
        born[o.id] = i, size[o.id] = o.size;
      } else if (size[o.id] >= (std::size_t{128} << 20)) {
        ++large;
        short_lived += i - born[o.id] < 32;
      }
    }
    CHECK(large > 300);
    CHECK(short_lived * 10 > large * 8);
    CHECK(double(t.peak_live) / gib < 16.0);
  }
  SUBCASE("kv cache: live bytes rise and fall twice, caches reallocated larger") {
    const auto t = tg::kv_cache(7, 1);
    std::vector<std::size_t> size(t.ids, 0);
    std::uint64_t live = 0;
    std::vector<std::uint64_t> at;  // live bytes at each checkpoint: one per 100 decode steps, then the end
    std::size_t next = 0;
    for (std::size_t i = 0; i < t.ops.size(); ++i) {
      const auto& o = t.ops[i];
      if (o.alloc)
        live += size[o.id] = o.size;
      else
        live -= size[o.id];
      if (next < t.checkpoints.size() && t.checkpoints[next] == i + 1) at.push_back(live), ++next;
    }
    REQUIRE(at.size() >= 12);
    std::string profile;
    for (auto v : at) profile += std::to_string(v >> 20) + " ";
    MESSAGE("live MiB per 100 steps: " << profile);
    // Each wave's busy span ends at step 200 (800), its quiet one at 600 (1200).
    CHECK(at[1] > 2 * at[5]);
    CHECK(at[7] > 2 * at[11]);
    CHECK(distinct_sizes(t) > 100);
    CHECK(double(t.peak_live) / gib > 0.5);
    CHECK(double(t.peak_live) / gib < 16.0);
  }
}

TEST_CASE("fragmentation at the peak: the bytes reserved beyond live, and that as a fraction of live") {
  const auto f = tg::fragmentation_at_peak(std::uint64_t{1075} << 20, std::uint64_t{1000} << 20);
  CHECK(f.bytes == std::uint64_t{75} << 20);
  CHECK(f.of_live == doctest::Approx(0.075));
  const auto exact = tg::fragmentation_at_peak(512, 512);  // nothing held beyond live
  CHECK(exact.bytes == 0);
  CHECK(exact.of_live == 0);
  CHECK(tg::fragmentation_at_peak(100, 200).bytes == 0);  // a side that held less than live at the peak: none
  CHECK(tg::fragmentation_at_peak(100, 0).of_live == 0);  // no live bytes: no fraction
}
