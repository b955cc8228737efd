// The caching allocator across streams: cross-stream reuse gated on events (proved with a stream held by a host
// function), merging across streams, random frees on random streams, threads. Every case runs under the leak check.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <iterator>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "caching_support.hpp"

using namespace pvmm;
using namespace pvmm_test;
using namespace caching_test;
using namespace std::chrono_literals;

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
