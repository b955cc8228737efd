// A pool lives while its owner or any of its allocations does (invariant 17): raw pointers from allocate_async
// outlive the owner, stay mapped and are freed with pvmm::free_async; owners' destructors free without fault
// injection.
#include <thread>
#include <vector>

#include <pvmm/diagnostics.hpp>

#include "memory_kinds.hpp"

using namespace pvmm;
using namespace pvmm_test;

TEST_SUITE("pool") {
  PVMM_CASE("a pool given up with raw allocations left keeps their memory until pvmm::free_async frees them") {
    PVMM_REQUIRE_POOLS();
    auto s = stream::create(0).value();
    const std::size_t size = mib;
    const auto before = query_live_objects();
    for (const bool by_release : {true, false}) {
      CAPTURE(by_release);
      void* p = nullptr;
      {
        auto pool = memory_pool::create({}).value();
        p = pool.allocate_async(size, s).value();
        PVMM_CHECK_OK(s.copy_async(p, pattern(size, 71).data(), size));
        PVMM_CHECK_OK(s.synchronize());
        if (by_release) PVMM_CHECK_OK(pool.release());
      }  // the owner is gone either way: the pool must stay for p
      CHECK(query_live_objects().pools == before.pools + 1);
      CHECK(read_back(s, p, size) == pattern(size, 71));  // still mapped, still p's data
      {
        // A pool created now must not land on p's memory: writing it leaves p's data alone.
        auto other = memory_pool::create({}).value();
        auto q = other.allocate(size, s).value();
        CHECK(q.data() != p);
        PVMM_CHECK_OK(s.copy_async(q.data(), pattern(size, 72).data(), size));
        PVMM_CHECK_OK(s.synchronize());
        CHECK(read_back(s, p, size) == pattern(size, 71));
      }
      PVMM_CHECK_OK(pvmm::free_async(p, s));
      PVMM_CHECK_OK(s.synchronize());
      CHECK(query_live_objects().pools == before.pools);                // the last raw free took the pool with it
      PVMM_CHECK_ERRC(pvmm::free_async(p, s), errc::invalid_argument);  // freed once only
    }
  }

  PVMM_CASE("an orphaned pool goes with its last raw allocation: counted once, a failed free kept, frees racing") {
    // The raw allocations are counted when the owner goes (not on each allocate and free): the count must be exact
    // whatever was freed before, whatever fails, and whatever frees run while the owner goes.
    PVMM_REQUIRE_POOLS();
    auto s = stream::create(0).value();
    const auto before = query_live_objects();
    std::vector<void*> raw;
    {
      auto pool = memory_pool::create({}).value();
      for (int i = 0; i < 4; ++i) raw.push_back(pool.allocate_async(4096, s).value());
      auto owned = pool.allocate(4096, s).value();  // not raw: the pool does not wait for it
      PVMM_CHECK_OK(pool.free_async(raw[0], s));    // freed before the owner goes: not counted
    }
    CHECK(query_live_objects().pools == before.pools + 1);
    PVMM_CHECK_OK(pvmm::free_async(raw[1], s));
    pvmm::testing::fail_nth_backend_call(1);  // the free's backend call fails: raw[2] stays live, still counted
    PVMM_CHECK_ERRC(pvmm::free_async(raw[2], s), errc::backend_error);
    pvmm::testing::fail_nth_backend_call(0);
    PVMM_CHECK_OK(pvmm::free_async(raw[2], s));
    CHECK(query_live_objects().pools == before.pools + 1);  // raw[3] is live
    PVMM_CHECK_OK(pvmm::free_async(raw[3], s));
    PVMM_CHECK_OK(s.synchronize());
    CHECK(query_live_objects().pools == before.pools);
    PVMM_CHECK_ERRC(pvmm::free_async(raw[3], s), errc::invalid_argument);

    // Another thread frees every raw pointer while the owner goes: each free is counted once, before or after.
    for (int round = 0; round < 20; ++round) {
      CAPTURE(round);
      auto pool = memory_pool::create({}).value();
      raw.clear();
      for (int i = 0; i < 32; ++i) raw.push_back(pool.allocate_async(4096, s).value());
      int failed = 0;
      std::thread freeing([&] {
        for (void* p : raw) failed += !pvmm::free_async(p, s).has_value();
      });
      PVMM_CHECK_OK(pool.release());
      freeing.join();
      CHECK(failed == 0);
      PVMM_CHECK_OK(s.synchronize());
      CHECK(query_live_objects().pools == before.pools);  // gone with the last free, whichever thread saw it
    }
  }

  PVMM_CASE("pvmm::free_async frees a raw pointer of a live pool, an owned or foreign pointer is refused") {
    PVMM_REQUIRE_POOLS();
    auto s = stream::create(0).value();
    auto pool = memory_pool::create({}).value();
    void* raw = pool.allocate_async(4096, s).value();
    auto owned = pool.allocate(4096, s).value();
    PVMM_CHECK_ERRC(pvmm::free_async(owned.data(), s), errc::invalid_argument);
    PVMM_CHECK_ERRC(pool.free_async(owned.data(), s), errc::invalid_argument);  // its owner would free it again
    CHECK(owned.valid());
    int local = 0;
    PVMM_CHECK_ERRC(pvmm::free_async(&local, s), errc::invalid_argument);
    PVMM_CHECK_ERRC(pvmm::free_async(nullptr, s), errc::invalid_argument);
    PVMM_CHECK_OK(pvmm::free_async(raw, s));
    PVMM_CHECK_ERRC(pool.free_async(raw, s), errc::invalid_argument);
    PVMM_CHECK_OK(owned.free_async(s));
    PVMM_CHECK_OK(s.synchronize());
    CHECK(pool.usage().value().used_current == 0);
  }

  PVMM_CASE("a pool_allocation's destructor frees even while fault injection is armed (teardown bypasses it)") {
    PVMM_REQUIRE_POOLS();
    auto s = stream::create(0).value();
    auto pool = memory_pool::create({}).value();
    {
      auto a = pool.allocate(64 * 1024, s).value();
      PVMM_CHECK_OK(s.synchronize());
      pvmm::testing::fail_nth_backend_call(1);  // the destructor's free would be the next backend call
    }
    pvmm::testing::fail_nth_backend_call(0);
    PVMM_CHECK_OK(s.synchronize());
    CHECK(pool.usage().value().used_current == 0);
    CHECK(query_live_objects().pool_allocations == 0);
    // An explicit free that fails keeps the allocation owned, so it can be retried.
    auto b = pool.allocate(4096, s).value();
    pvmm::testing::fail_nth_backend_call(1);
    PVMM_CHECK_ERRC(b.free_async(s), errc::backend_error);
    pvmm::testing::fail_nth_backend_call(0);
    CHECK(b.valid());
    PVMM_CHECK_OK(b.free_async(s));
    PVMM_CHECK_OK(s.synchronize());
  }

  PVMM_CASE("a pool_allocation outliving the stream it was allocated on is freed by its destructor (issue 36)") {
    // Python decides destruction order: the stream may go first. The destructor used to free on that stream.
    PVMM_REQUIRE_POOLS();
    auto pool = memory_pool::create({}).value();
    const auto before = query_live_objects();
    {
      auto s = stream::create(0).value();
      auto a = pool.allocate(64 * 1024, s).value();
      PVMM_CHECK_OK(s.copy_async(a.data(), pattern(64 * 1024, 5).data(), 64 * 1024));
      PVMM_CHECK_OK(s.release());  // waits for the copy, then the stream is gone; `a` still owns its memory
      CHECK(a.valid());
    }  // a's destructor: frees on the pool's own stream
    CHECK(query_live_objects().pool_allocations == before.pool_allocations);
    CHECK(pool.usage().value().used_current == 0);
    auto s2 = stream::create(0).value();
    auto b = pool.allocate(64 * 1024, s2).value();  // the memory is reusable on another stream at once
    PVMM_CHECK_OK(b.free_async(s2));
    PVMM_CHECK_OK(s2.synchronize());
  }
}
