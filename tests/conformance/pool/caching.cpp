// The caching allocator (pvmm/caching_allocator.hpp) on every backend: data round trips, reuse on the home stream,
// cross-stream reuse gated on events (proved with a stream held by a host function), stitching of idle chunks,
// trim and pressure giving memory back, exact errors. Every case runs under the leak check.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <iterator>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "any_allocator.hpp"
#include "memory_kinds.hpp"

using namespace pvmm;
using namespace pvmm_test;
using namespace std::chrono_literals;

namespace {

#define PVMM_REQUIRE_CACHING()                                                             \
  do {                                                                                     \
    PVMM_REQUIRE_DEVICE();                                                                 \
    PVMM_REQUIRE_CAPABILITY(pvmm_test::caps().vmm.supported, "virtual memory management"); \
  } while (0)

/// Writes a pattern made from `seed` into `size` bytes at `p` in `s`'s order, reads it back and compares.
void round_trip(void* p, std::size_t size, stream_ref s, unsigned seed) {
  std::vector<unsigned char> out(size), in(size, 0);
  for (std::size_t i = 0; i < size; ++i) out[i] = static_cast<unsigned char>((i * 131 + seed) & 0xff);
  PVMM_CHECK_OK(s.copy_async(p, out.data(), size));
  PVMM_CHECK_OK(s.copy_async(in.data(), p, size));
  PVMM_CHECK_OK(s.synchronize());
  CHECK(in == out);
}

void set_flag(void* p) { static_cast<std::atomic<bool>*>(p)->store(true); }

/// slack_percent 0: a miss cuts chunks out of cached blocks before creating any (the stitching cases).
caching_allocator make(bool wait = true, std::size_t max_reserved = 0, unsigned slack_percent = 8) {
  caching_options o;
  o.wait_for_pending_frees = wait;
  o.max_reserved = max_reserved;
  o.slack_percent = slack_percent;
  return caching_allocator::create(o).value();
}

}  // namespace

PVMM_CASE("caching allocator: data written reads back, blocks do not overlap, stats count live and reserved") {
  PVMM_REQUIRE_CACHING();
  auto s = stream::create(0).value();  // before the allocator: its cache records events on it
  auto a = make();
  const std::size_t sizes[] = {
      1, 512, 700, 4096, 100000, std::size_t{1} << 20, (std::size_t{1} << 20) + 1, a.chunk_size() * 3 + 5};
  std::vector<std::pair<char*, std::size_t>> got;
  std::size_t asked = 0;
  for (std::size_t n : sizes) {
    auto p = a.allocate(n, s);
    PVMM_REQUIRE_VALUE(p);
    CHECK(reinterpret_cast<std::uintptr_t>(*p) % 512 == 0);
    got.emplace_back(static_cast<char*>(*p), n);
    asked += n;
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    round_trip(got[i].first, got[i].second, s, static_cast<unsigned>(i));
    for (std::size_t j = 0; j < i; ++j)
      CHECK((got[i].first + got[i].second <= got[j].first || got[j].first + got[j].second <= got[i].first));
  }
  auto st = a.stats();
  CHECK(st.live == asked);
  CHECK(st.live_blocks == got.size());
  CHECK(st.reserved >= st.live);
  CHECK(st.peak_live == asked);
  for (auto& g : got) PVMM_CHECK_OK(a.deallocate(g.first, s));
  const auto reserved = st.reserved;
  st = a.stats();
  CHECK(st.live == 0);
  CHECK(st.peak_live == asked);
  CHECK(st.cached_blocks >= 1);
  CHECK(st.reserved == reserved);  // frees keep the memory cached
  PVMM_CHECK_OK(s.synchronize());
  PVMM_CHECK_OK(a.release());
}

PVMM_CASE("caching allocator: a block freed on its stream is reused there at once, without new memory") {
  PVMM_REQUIRE_CACHING();
  auto s = stream::create(0).value();  // before the allocator: its cache records events on it
  auto a = make();
  for (std::size_t n : {std::size_t{3000}, a.chunk_size() + 1}) {
    INFO(n << " bytes");
    void* p = a.allocate(n, s).value();
    const auto before = a.stats();
    PVMM_CHECK_OK(a.deallocate(p, s));
    auto q = a.allocate(n, s);
    PVMM_REQUIRE_VALUE(q);
    CHECK(*q == p);
    CHECK(a.stats().reserved == before.reserved);
    CHECK(a.stats().cache_hits == before.cache_hits + 1);
    round_trip(*q, n, s, 7);
    PVMM_CHECK_OK(a.deallocate(*q, s));
  }
  PVMM_CHECK_OK(s.synchronize());
}

PVMM_CASE("caching allocator: a cross-stream free is reused only after its event, waited for on the device") {
  PVMM_REQUIRE_CACHING();
  const std::size_t c = make().chunk_size();
  // Sizes that leave no room for a second one in what their region leaves: the block that comes back is p's.
  for (bool wait : {true, false})
    for (std::size_t n : {c / 2 + 1, std::size_t{3} << 20}) {
      INFO("wait_for_pending_frees=" << wait << ", " << n << " bytes");
      auto home = stream::create(0).value();
      auto other = stream::create(0).value();
      auto a = make(wait);
      void* p = a.allocate(n, home).value();
      PVMM_CHECK_OK(home.synchronize());
      gate g;
      PVMM_CHECK_OK(other.launch_host_function(gate::hold, &g));
      PVMM_CHECK_OK(a.deallocate(p, other));  // its event, recorded at the next allocation, is behind the held work
      auto q = a.allocate(n, home);
      PVMM_REQUIRE_VALUE(q);
      std::atomic<bool> ran{false};
      PVMM_CHECK_OK(home.launch_host_function(set_flag, &ran));
      if (wait) {
        CHECK(*q == p);  // reused, with home waiting for the free's event
        CHECK(a.stats().waits == 1);
        std::this_thread::sleep_for(50ms);
        CHECK_FALSE(ran.load());  // home's work is held behind the other stream's free
      } else {
        CHECK(*q != p);  // the pending free is not handed out
        CHECK(a.stats().waits == 0);
      }
      g.open = true;
      PVMM_CHECK_OK(home.synchronize());
      CHECK(ran.load());
      PVMM_CHECK_OK(other.synchronize());
      round_trip(*q, n, home, 3);
      if (!wait) {  // once its event is done, the block comes back
        auto r = a.allocate(n, home);
        PVMM_REQUIRE_VALUE(r);
        CHECK(*r == p);
        PVMM_CHECK_OK(a.deallocate(*r, home));
      }
      PVMM_CHECK_OK(a.deallocate(*q, home));
      PVMM_CHECK_OK(home.synchronize());
      PVMM_CHECK_OK(a.release());
    }
}

PVMM_CASE("caching allocator: another stream takes a cached block only once its home stream's work is done") {
  PVMM_REQUIRE_CACHING();
  auto s1 = stream::create(0).value();
  auto s2 = stream::create(0).value();
  auto a = make(false);
  const std::size_t n = a.chunk_size();  // a whole region: nothing else of it to hand out
  void* p = a.allocate(n, s1).value();
  gate g;
  PVMM_CHECK_OK(s1.launch_host_function(gate::hold, &g));  // work that may still use p
  PVMM_CHECK_OK(a.deallocate(p, s1));
  auto q = a.allocate(n, s2);
  PVMM_REQUIRE_VALUE(q);
  CHECK(*q != p);
  g.open = true;
  PVMM_CHECK_OK(s1.synchronize());
  auto r = a.allocate(n, s2);
  PVMM_REQUIRE_VALUE(r);
  CHECK(*r == p);
  round_trip(*r, n, s2, 11);
  PVMM_CHECK_OK(a.deallocate(*q, s2));
  PVMM_CHECK_OK(a.deallocate(*r, s2));
  PVMM_CHECK_OK(s2.synchronize());
}

PVMM_CASE("caching allocator: idle chunks of freed blocks are stitched into a larger range, not reserved again") {
  PVMM_REQUIRE_CACHING();
  auto s = stream::create(0).value();  // before the allocator: its cache records events on it
  auto a = make();
  const std::size_t c = a.chunk_size();
  void* x = a.allocate(2 * c, s).value();
  void* y = a.allocate(2 * c, s).value();
  void* z = a.allocate(2 * c, s).value();
  PVMM_CHECK_OK(a.deallocate(x, s));
  PVMM_CHECK_OK(a.deallocate(z, s));
  PVMM_CHECK_OK(s.synchronize());
  const auto before = a.stats();
  CHECK(before.reserved == 6 * c);
  auto big = a.allocate(4 * c, s);  // fits no cached block: stitched from x's and z's chunks
  PVMM_REQUIRE_VALUE(big);
  const auto after = a.stats();
  CHECK(after.reserved == 6 * c);
  CHECK(after.stitches == before.stitches + 1);
  CHECK(after.chunks_reused == before.chunks_reused + 4);
  round_trip(*big, 4 * c, s, 5);
  round_trip(y, 2 * c, s, 6);
  PVMM_CHECK_OK(a.deallocate(*big, s));
  PVMM_CHECK_OK(a.deallocate(y, s));
}

PVMM_CASE("caching allocator: a cached block is split for smaller requests and merged back when they are freed") {
  PVMM_REQUIRE_CACHING();
  auto s = stream::create(0).value();
  auto a = make();
  const std::size_t c = a.chunk_size();
  char* whole = static_cast<char*>(a.allocate(8 * c, s).value());
  PVMM_CHECK_OK(a.deallocate(whole, s));
  const auto before = a.stats();
  auto x = a.allocate(3 * c, s);  // the front of the cached block
  auto y = a.allocate(2 * c, s);  // the front of what was left
  PVMM_REQUIRE_VALUE(x);
  PVMM_REQUIRE_VALUE(y);
  CHECK(*x == whole);
  CHECK(*y == whole + 3 * c);
  CHECK(a.stats().reserved == before.reserved);
  CHECK(a.stats().stitches == before.stitches);
  round_trip(*x, 3 * c, s, 1);
  round_trip(*y, 2 * c, s, 2);
  PVMM_CHECK_OK(a.deallocate(*y, s));
  PVMM_CHECK_OK(a.deallocate(*x, s));
  CHECK(a.stats().cached_blocks == 1);  // merged back into one block
  auto again = a.allocate(8 * c, s);
  PVMM_REQUIRE_VALUE(again);
  CHECK(*again == whole);
  CHECK(a.stats().stitches == before.stitches);
  round_trip(*again, 8 * c, s, 3);
  PVMM_CHECK_OK(a.deallocate(*again, s));
}

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

PVMM_CASE("caching allocator: blocks split below a chunk, so a small request fills what a large one left") {
  PVMM_REQUIRE_CACHING();
  auto s = stream::create(0).value();
  auto a = make();
  const std::size_t c = a.chunk_size();
  char* large = static_cast<char*>(a.allocate(c + c / 2, s).value());  // two chunks, half of one left
  auto small = a.allocate(c / 2 - 4096, s);
  PVMM_REQUIRE_VALUE(small);
  CHECK(*small == large + c + c / 2);
  CHECK(a.stats().reserved == 2 * c);
  CHECK(a.stats().stitches == 1);
  round_trip(large, c + c / 2, s, 1);
  round_trip(*small, c / 2 - 4096, s, 2);
  PVMM_CHECK_OK(a.deallocate(large, s));
  PVMM_CHECK_OK(a.deallocate(*small, s));
  CHECK(a.stats().cached_blocks == 1);  // merged back into the whole region
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
  auto a = make(false, 0, 0);
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

PVMM_CASE("caching allocator: free neighbours merge across the streams they were used on") {
  PVMM_REQUIRE_CACHING();
  auto s1 = stream::create(0).value();
  auto s2 = stream::create(0).value();
  auto a = make();
  const std::size_t c = a.chunk_size();
  char* whole = static_cast<char*>(a.allocate(2 * c, s1).value());
  PVMM_CHECK_OK(a.deallocate(whole, s1));
  PVMM_CHECK_OK(s1.synchronize());
  auto front = a.allocate(c, s2);  // s1's work is done: s2 takes the front, the back stays cached for s1
  PVMM_REQUIRE_VALUE(front);
  CHECK(*front == whole);
  round_trip(*front, c, s2, 1);
  PVMM_CHECK_OK(a.deallocate(*front, s2));
  CHECK(a.stats().cached_blocks == 1);
  const auto stitches = a.stats().stitches;
  auto again = a.allocate(2 * c, s2);
  PVMM_REQUIRE_VALUE(again);
  CHECK(*again == whole);
  CHECK(a.stats().stitches == stitches);
  PVMM_CHECK_OK(a.deallocate(*again, s2));
  PVMM_CHECK_OK(s2.synchronize());
}

PVMM_CASE("caching allocator: random sizes on three streams, freed on random ones: no overlap, data intact") {
  PVMM_REQUIRE_CACHING();
  stream streams[3] = {stream::create(0).value(), stream::create(0).value(), stream::create(0).value()};
  auto a = make();
  const std::size_t c = a.chunk_size();
  std::mt19937 rng(38);
  struct held {
    char* p;
    std::size_t n;
    int on;
    std::uint64_t stamp;
  };
  std::vector<held> live;
  std::map<char*, std::size_t> ranges;  // live blocks by address, to find overlaps
  auto stamp_check = [&](const held& h) {
    std::uint64_t head = 0, tail = 0;
    PVMM_CHECK_OK(streams[h.on].copy_async(&head, h.p, 8));
    PVMM_CHECK_OK(streams[h.on].copy_async(&tail, h.p + h.n - 8, 8));
    PVMM_CHECK_OK(streams[h.on].synchronize());
    CHECK(head == h.stamp);
    CHECK(tail == ~h.stamp);
  };
  for (int i = 0; i < 3000; ++i) {
    if (live.size() < 4 || (live.size() < 40 && rng() % 2)) {
      const std::size_t n = 16 + rng() % (rng() % 4 == 0 ? 3 * c : c / 4);
      const int on = static_cast<int>(rng() % 3);
      auto p = a.allocate(n, streams[on]);
      PVMM_REQUIRE_VALUE(p);
      held h{static_cast<char*>(*p), n, on, rng()};
      auto next = ranges.lower_bound(h.p);
      CHECK((next == ranges.end() || h.p + n <= next->first));
      CHECK((next == ranges.begin() || std::prev(next)->first + std::prev(next)->second <= h.p));
      ranges.emplace(h.p, n);
      const std::uint64_t tail = ~h.stamp;
      PVMM_CHECK_OK(streams[on].copy_async(h.p, &h.stamp, 8));
      PVMM_CHECK_OK(streams[on].copy_async(h.p + n - 8, &tail, 8));
      PVMM_CHECK_OK(streams[on].synchronize());  // the stamps are on the stack
      live.push_back(h);
    } else {
      const std::size_t k = rng() % live.size();
      const held h = live[k];
      stamp_check(h);  // its stream synchronized: any stream may free it
      PVMM_CHECK_OK(a.deallocate(h.p, streams[rng() % 3]));
      ranges.erase(h.p);
      live[k] = live.back();
      live.pop_back();
    }
  }
  for (const held& h : live) {
    stamp_check(h);
    PVMM_CHECK_OK(a.deallocate(h.p, streams[h.on]));
  }
  CHECK(a.stats().live == 0);
  PVMM_CHECK_OK(a.trim());
  CHECK(a.stats().reserved == 0);
  CHECK(a.stats().cached_blocks == 0);
}

PVMM_CASE("caching allocator: bad input is refused with exact errors") {
  PVMM_REQUIRE_CACHING();
  caching_options o;
  o.device = 1 << 20;
  PVMM_CHECK_ERRC(caching_allocator::create(o), errc::invalid_device);
  o = {};
  o.chunk_size = 4096 + 1;
  PVMM_CHECK_ERRC(caching_allocator::create(o), errc::unaligned);
  auto a = make();
  auto s = stream::create(0).value();
  PVMM_CHECK_ERRC(a.allocate(0, s), errc::invalid_size);
  PVMM_CHECK_ERRC(a.allocate(16, stream_ref{}), errc::invalid_argument);
  PVMM_CHECK_ERRC(a.allocate(static_cast<std::size_t>(-1), s), errc::out_of_memory);
  int local = 0;
  PVMM_CHECK_ERRC(a.deallocate(&local, s), errc::invalid_argument);
  PVMM_CHECK_ERRC(a.deallocate(nullptr, s), errc::invalid_argument);
  void* p = a.allocate(64, s).value();
  PVMM_CHECK_ERRC(a.deallocate(p, stream_ref{}), errc::invalid_argument);
  PVMM_CHECK_ERRC(a.release(), errc::busy);
  PVMM_CHECK_OK(a.deallocate(p, s));
  PVMM_CHECK_ERRC(a.deallocate(p, s), errc::invalid_argument);  // twice
  auto moved = std::move(a);
  PVMM_CHECK_ERRC(a.allocate(64, s), errc::already_released);
  PVMM_CHECK_ERRC(a.deallocate(p, s), errc::already_released);
  PVMM_CHECK_ERRC(a.trim(), errc::already_released);
  PVMM_CHECK_ERRC(a.release(), errc::already_released);
  PVMM_CHECK_OK(moved.release());
  PVMM_CHECK_ERRC(moved.release(), errc::already_released);
}

PVMM_CASE("caching allocator: threads allocating on their own streams at once get their own data back") {
  PVMM_REQUIRE_CACHING();
  auto s1 = stream::create(0).value();
  auto s2 = stream::create(0).value();
  auto a = make();
  std::atomic<int> failures{0};
  auto work = [&](unsigned seed, stream_ref s) {
    std::vector<void*> held;
    for (unsigned i = 0; i < 200; ++i) {
      const std::size_t n = 512u << ((i + seed) % 13);
      auto p = a.allocate(n, s);
      if (!p) {
        ++failures;
        return;
      }
      std::vector<unsigned char> out(n, static_cast<unsigned char>(seed + i)), in(n);
      (void)s.copy_async(*p, out.data(), n);
      (void)s.copy_async(in.data(), *p, n);
      (void)s.synchronize();
      if (in != out) ++failures;
      held.push_back(*p);
      if (held.size() > 4) {
        if (!a.deallocate(held.front(), s)) ++failures;
        held.erase(held.begin());
      }
    }
    for (void* p : held)
      if (!a.deallocate(p, s)) ++failures;
    (void)s.synchronize();
  };
  std::thread t1(work, 1u, stream_ref(s1)), t2(work, 2u, stream_ref(s2));
  t1.join();
  t2.join();
  CHECK(failures.load() == 0);
  CHECK(a.stats().live == 0);
  PVMM_CHECK_OK(a.release());
}

namespace {
/// The shared "any allocator" bodies for the caching allocator's raw pointers, each held by a small owner (as an
/// allocator plug-in would). Its chunks are created without handle types: sharing one is refused.
struct caching_pointers {
  static constexpr const char* name = "caching allocator pointers";
  pvmm::stream on = pvmm::stream::create(0).value();  // before the allocator: its cache records events on it
  pvmm::caching_allocator cache = pvmm::caching_allocator::create().value();

  static std::string unavailable() {
    if (auto why = pvmm_test::no_device_reason(); !why.empty()) return why;
    return pvmm_test::caps().vmm.supported ? std::string() : "the device lacks virtual memory management";
  }
  static std::size_t unit() { return std::size_t{64} << 10; }
  static bool whole_units_only() { return false; }
  static pvmm::errc impossible_size_error() { return pvmm::errc::out_of_memory; }
  static pvmm::errc released_again_error() { return pvmm::errc::invalid_argument; }
  static bool shareable() { return false; }
  static pvmm::errc unshareable_error() { return pvmm::errc::handle_type_not_requested; }

  struct block {
    caching_pointers* from = nullptr;
    void* data = nullptr;
    bool owned = false;  // false once given back: `data` stays, so that a second deallocate names the same pointer
    block(caching_pointers* f, void* d) : from(f), data(d), owned(true) {}
    block(block&& other) noexcept : from(other.from), data(other.data), owned(other.owned) { other.owned = false; }
    block& operator=(block&&) = delete;
    ~block() {
      if (owned) (void)from->cache.deallocate(data, from->on);
    }
  };
  pvmm::result<block> allocate(std::size_t size) {
    auto p = cache.allocate(size, on);
    if (!p) return std::move(p).error();
    return block(this, *p);
  }
  static void* address(const block& b) { return b.data; }
  pvmm::status release(block& b) {
    auto done = cache.deallocate(b.data, on);
    if (done) b.owned = false;
    return done;
  }
  void write(void* at, const std::vector<std::uint32_t>& words) { any_allocator::stream_write(on, at, words); }
  std::vector<std::uint32_t> read(const void* at, std::size_t bytes) {
    return any_allocator::stream_read(on, at, bytes);
  }
  /// Retains the chunk under the block and exports it: refused, its chunks have no handle types.
  using view = pvmm::physical_allocation;
  static void* view_address(const view&) { return nullptr; }
  pvmm::result<view> share(const block& b) {
    auto chunk = pvmm::physical_allocation::retain(b.data);
    if (!chunk) return std::move(chunk).error();
    auto fd = chunk->export_posix_fd();
    if (!fd) return std::move(fd).error();
    return std::move(*chunk);
  }
};
}  // namespace

TEST_SUITE("pool"){PVMM_ANY_ALLOCATOR_CASES(caching_pointers)}

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
  auto cutting = make(true, 0, 0);
  const auto cut = cycles(cutting);
  CHECK(cut.end.maps > cut.warm.maps);  // the churn the slack removes
  auto a = make();
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
