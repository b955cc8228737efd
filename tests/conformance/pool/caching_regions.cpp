// The caching allocator's regions: idle chunks stitched, ghosts, trim and pressure giving memory back, backend
// failures at every step, the warm path's driver calls, the slack. Every case runs under the leak check.
#include <chrono>
#include <cstdint>
#include <iterator>
#include <thread>
#include <vector>

#include "caching_support.hpp"

using namespace pvmm;
using namespace pvmm_test;
using namespace caching_test;
using namespace std::chrono_literals;

// Idle chunks of freed blocks stitched into a larger range (grow_in_place off), not reserved again: caching_grow.cpp,
// beside the growth in place that the same misses make by default.

PVMM_CASE("caching allocator: trim gives back everything cached, a live block keeps its chunks") {
  PVMM_REQUIRE_CACHING();
  auto s = stream::create(0).value();  // before the allocator: its cache records events on it
  auto a = make();
  const std::size_t c = a.chunk_size();
  void* keep = a.allocate(c, s).value();
  for (std::size_t n : {std::size_t{100}, std::size_t{70000}, 3 * c})
    PVMM_CHECK_OK(a.deallocate(a.allocate(n, s).value(), s));
  CHECK(a.stats().reserved > c);
  PVMM_CHECK_OK(a.trim());
  CHECK(a.stats().reserved == c);
  CHECK(a.stats().cached_blocks == 0);
  round_trip(keep, c, s, 9);
  PVMM_CHECK_OK(a.deallocate(keep, s));
  PVMM_CHECK_OK(a.trim());
  CHECK(a.stats().reserved == 0);
  CHECK(a.stats().peak_reserved > c);
  a.reset_peaks();
  CHECK(a.stats().peak_reserved == 0);
}

PVMM_CASE("caching allocator: under pressure the cache is given back and the allocation retried") {
  PVMM_REQUIRE_CACHING();
  caching_options o;
  auto probe = caching_allocator::create(o).value();
  const std::size_t c = probe.chunk_size();
  auto s = stream::create(0).value();
  auto busy = stream::create(0).value();
  auto a = make(false, 2 * c);
  // A cached chunk nothing may take now (work on `busy` may still use it): only the pressure path, which waits
  // for that work on the host, can give it back.
  void* p = a.allocate(1000, busy).value();
  gate g;
  PVMM_CHECK_OK(busy.launch_host_function(gate::hold, &g));
  PVMM_CHECK_OK(a.deallocate(p, busy));
  std::thread opener([&] {
    std::this_thread::sleep_for(50ms);
    g.open = true;
  });
  auto big = a.allocate(2 * c, s);  // needs that chunk back
  opener.join();
  PVMM_REQUIRE_VALUE(big);
  CHECK(a.stats().pressure_retries == 1);
  CHECK(a.stats().host_syncs >= 2);  // both streams
  CHECK(a.stats().reserved == 2 * c);
  PVMM_CHECK_ERRC(a.allocate(1, s), errc::out_of_memory);  // nothing cached is left to give back
  round_trip(*big, 2 * c, s, 2);
  PVMM_CHECK_OK(a.deallocate(*big, s));
  PVMM_CHECK_OK(a.release());
}

PVMM_CASE("caching allocator: a backend failure at any step of an allocation leaves it consistent, nothing leaks") {
  PVMM_REQUIRE_CACHING();
  auto s = stream::create(0).value();
  auto other = stream::create(0).value();
  bool clean_pass = false;
  for (std::size_t n = 1; n < 200 && !clean_pass; ++n) {
    INFO("failing backend call " << n);
    auto a = make();
    const std::size_t c = a.chunk_size();
    void* kept = a.allocate(2 * c, other).value();  // cached on another stream: a claim, a split, a stitch
    PVMM_CHECK_OK(a.deallocate(kept, other));
    const auto before = testing::backend_call_count();
    testing::fail_nth_backend_call(n);
    auto big = a.allocate(3 * c, s);
    auto small = a.allocate(700, s);
    testing::fail_nth_backend_call(0);
    clean_pass = testing::backend_call_count() - before < n;  // no call was failed: every step was covered
    if (!big || !small) CHECK((big ? small.code() : big.code()) == errc::backend_error);
    for (auto* r : {&big, &small})
      if (*r) {
        round_trip(**r, 700, s, 1);
        PVMM_CHECK_OK(a.deallocate(**r, s));
      }
    auto again = a.allocate(3 * c, s);  // usable after the failure
    PVMM_REQUIRE_VALUE(again);
    round_trip(*again, 3 * c, s, 4);
    PVMM_CHECK_OK(a.deallocate(*again, s));
    CHECK(a.stats().live == 0);
    PVMM_CHECK_OK(a.release());
  }
  CHECK(clean_pass);
}

/// The driver calls a caching allocator's statistics count, summed.
std::uint64_t driver_calls(const caching_stats& st) {
  return st.chunks_created + st.maps + st.unmaps + st.event_records + st.event_queries + st.device_waits +
         st.host_syncs + st.stitches;
}

PVMM_CASE("caching allocator: the warm path (allocate and free on one stream, from the cache) makes no driver call") {
  PVMM_REQUIRE_CACHING();
  auto s = stream::create(0).value();
  auto a = make();
  const std::size_t c = a.chunk_size();
  const std::size_t sizes[] = {100, 5000, c / 3, c + 700, 3 * c, 512, 70000};
  auto cycle = [&] {
    std::vector<void*> held;
    for (std::size_t n : sizes) held.push_back(a.allocate(n, s).value());
    for (std::size_t i = held.size(); i-- > 0;) PVMM_CHECK_OK(a.deallocate(held[i], s));
  };
  cycle();  // fills the cache
  const auto before = a.stats();
  const auto calls = testing::backend_call_count();
  for (int round = 0; round < 20; ++round) cycle();
  const auto after = a.stats();
  CHECK(testing::backend_call_count() == calls);
  CHECK(driver_calls(after) == driver_calls(before));
  CHECK(after.cache_hits == before.cache_hits + 20 * std::size(sizes));
  CHECK(after.peak_reserved == before.peak_reserved);
  PVMM_CHECK_OK(s.synchronize());
}

PVMM_CASE(
    "caching allocator: a free makes no driver call, and cross-stream frees share one event recorded at the next "
    "allocation") {
  PVMM_REQUIRE_CACHING();
  auto s1 = stream::create(0).value();
  auto s2 = stream::create(0).value();
  auto a = make(false);
  const std::size_t n = a.chunk_size();  // one region each, so that the frees cannot merge
  void* p = a.allocate(n, s1).value();
  void* q = a.allocate(n, s1).value();
  void* r = a.allocate(n, s1).value();
  gate g;
  PVMM_CHECK_OK(s2.launch_host_function(gate::hold, &g));  // s2's uses of q and r are still queued
  const auto before = a.stats();
  PVMM_CHECK_OK(a.deallocate(p, s1));
  PVMM_CHECK_OK(a.deallocate(q, s2));  // used last on s2 (record_stream): s1 reuses it once s2's event says so
  PVMM_CHECK_OK(a.deallocate(r, s2));
  CHECK(driver_calls(a.stats()) == driver_calls(before));  // one event each at the frees before
  auto x = a.allocate(n, s1);  // records one event on s2 (behind the held work), then takes p
  PVMM_REQUIRE_VALUE(x);
  CHECK(*x == p);
  CHECK(a.stats().event_records == before.event_records + 1);
  auto y = a.allocate(n, s1);  // q and r are pending on s2: not handed out, not fenced again
  PVMM_REQUIRE_VALUE(y);
  CHECK(*y != q);
  CHECK(*y != r);
  CHECK(a.stats().event_records == before.event_records + 1);
  g.open = true;
  PVMM_CHECK_OK(s2.synchronize());
  auto z = a.allocate(n, s1);  // the one event, seen done, releases both
  auto w = a.allocate(n, s1);
  PVMM_REQUIRE_VALUE(z);
  PVMM_REQUIRE_VALUE(w);
  CHECK(((*z == q && *w == r) || (*z == r && *w == q)));
  CHECK(a.stats().event_records == before.event_records + 1);
  for (void* b : {*x, *y, *z, *w}) {
    round_trip(b, n, s1, 5);
    PVMM_CHECK_OK(a.deallocate(b, s1));
  }
  PVMM_CHECK_OK(s1.synchronize());
}

PVMM_CASE("caching allocator: chunks still in use in the taking stream's order are stitched, not created again") {
  PVMM_REQUIRE_CACHING();
  auto s = stream::create(0).value();
  auto a = make(false, 0, 0, false);  // a new region, not x grown in place
  const std::size_t c = a.chunk_size();
  void* x = a.allocate(2 * c, s).value();
  round_trip(x, 2 * c, s, 1);
  gate g;
  PVMM_CHECK_OK(s.launch_host_function(gate::hold, &g));  // work queued on s that may still use x
  PVMM_CHECK_OK(a.deallocate(x, s));
  auto big = a.allocate(3 * c, s);  // x's chunks, mapped again in s's order (still mapped at x too), and one new
  PVMM_REQUIRE_VALUE(big);
  CHECK(a.stats().reserved == 3 * c);
  CHECK(a.stats().chunks_reused == 2);
  const auto unmaps = a.stats().unmaps;
  CHECK(unmaps == 0);  // x's range stays mapped while the held work may touch it
  g.open = true;
  PVMM_CHECK_OK(s.synchronize());
  round_trip(*big, 3 * c, s, 2);
  PVMM_CHECK_OK(a.deallocate(*big, s));
  PVMM_CHECK_OK(a.trim());  // unmaps x's old range now that its work is done, and gives every chunk back
  CHECK(a.stats().unmaps > unmaps);
  CHECK(a.stats().reserved == 0);
  CHECK(a.stats().peak_reserved == 3 * c);
}

PVMM_CASE("caching allocator: ghosts stay mapped on misses until their address space passes max_ghost_bytes") {
  PVMM_REQUIRE_CACHING();
  // Each request is one chunk larger than the last: each stitches the previous one's chunks and one new chunk,
  // leaving the previous chunks mapped at their old place too (ghosts: 2 + 3 + 4 chunks over 5 held). Before,
  // the 5-chunk miss unmapped the 5 ghosts of the first two (more than the 4 chunks held then): 5 unmap calls
  // for address space only. With the default bound (16 GiB) none goes; a bound of 4 chunks unmaps the oldest
  // ghost, enough to get down to it; trim unmaps every ghost.
  const std::size_t c = make().chunk_size();
  for (std::size_t bound_chunks : {std::size_t{0}, std::size_t{4}}) {
    INFO("max_ghost_bytes = " << bound_chunks << " chunks");
    auto s = stream::create(0).value();
    caching_options o;
    o.slack_percent = 0;
    o.max_ghost_bytes = bound_chunks * c;
    o.grow_in_place = false;  // else each request grows the last one's region by one chunk: no ghost
    auto a = caching_allocator::create(o).value();
    for (std::size_t k = 2; k <= 4; ++k) PVMM_CHECK_OK(a.deallocate(a.allocate(k * c, s).value(), s));
    PVMM_CHECK_OK(s.synchronize());
    CHECK(a.stats().reserved == 4 * c);
    CHECK(a.stats().unmaps == 0);
    CHECK(a.stats().ghost_bytes == 5 * c);
    void* last = a.allocate(5 * c, s).value();
    CHECK(a.stats().reserved == 5 * c);  // ghosts hold no physical memory
    CHECK(a.stats().chunks_reused == 2 + 3 + 4);
    CHECK(a.stats().unmaps == (bound_chunks ? 2u : 0u));
    CHECK(a.stats().ghost_bytes == (bound_chunks ? 7 : 9) * c);
    round_trip(last, 5 * c, s, 3);
    PVMM_CHECK_OK(a.deallocate(last, s));
    PVMM_CHECK_OK(a.trim());
    CHECK(a.stats().ghost_bytes == 0);
    CHECK(a.stats().unmaps == 9 + 5);  // every ghost, and the last region's chunks
    CHECK(a.stats().reserved == 0);
  }
}

PVMM_CASE("caching allocator: a miss within the slack creates chunks, so a free/allocate cycle stops mapping") {
  PVMM_REQUIRE_CACHING();
  auto s = stream::create(0).value();
  // Each cycle: 3 chunks, freed; then 2 + 2 chunks live at once, freed. Cutting chunks out of cached blocks on a
  // miss (slack 0) leaves no free block of 3 chunks for the next cycle, nor of 2 beside 2: every cycle maps chunks
  // again (and leaves ghosts to unmap). Within the slack the second miss creates 2 chunks instead (5 held for a
  // high mark of 4 live: at most two chunks above it), and from then on every request is a cache hit.
  struct counts {
    caching_stats warm, end;
  };
  auto cycles = [&](caching_allocator& a) {
    const std::size_t c = a.chunk_size();
    counts n;
    for (int i = 0; i < 6; ++i) {
      if (i == 1) n.warm = a.stats();
      void* x = a.allocate(3 * c, s).value();
      PVMM_CHECK_OK(a.deallocate(x, s));
      void* y = a.allocate(2 * c, s).value();
      void* z = a.allocate(2 * c, s).value();
      round_trip(y, 2 * c, s, static_cast<unsigned>(2 * i));
      round_trip(z, 2 * c, s, static_cast<unsigned>(2 * i + 1));
      PVMM_CHECK_OK(a.deallocate(y, s));
      PVMM_CHECK_OK(a.deallocate(z, s));
    }
    n.end = a.stats();
    return n;
  };
  auto cutting = make(true, 0, 0, false);  // grown in place, a region needs no cut: no churn either
  const auto cut = cycles(cutting);
  CHECK(cut.end.maps > cut.warm.maps);  // the churn the slack removes
  auto a = make(true, 0, 8, false);
  const std::size_t c = a.chunk_size();
  const auto n = cycles(a);
  CHECK(n.end.maps == n.warm.maps);
  CHECK(n.end.unmaps == n.warm.unmaps);
  CHECK(n.end.chunks_created == n.warm.chunks_created);
  CHECK(n.end.stitches == n.warm.stitches);
  CHECK(n.end.cache_hits == n.warm.cache_hits + 5 * 3);
  CHECK(n.end.peak_live == 4 * c);
  CHECK(n.end.peak_reserved == 5 * c);  // within the slack: the high mark of live plus at most two chunks
  CHECK(n.end.unmaps == 0);
}
