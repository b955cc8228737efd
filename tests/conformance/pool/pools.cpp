// Stream-ordered memory pools: data through pool memory, usage accounting, thresholds, trim, high marks,
// maximum size, reuse policies (the negative case), access, and every bad input with its error.
#include <atomic>
#include <chrono>
#include <limits>
#include <thread>

#include "memory_kinds.hpp"

using namespace pvmm;
using namespace pvmm_test;
using namespace std::chrono_literals;

namespace {

bool overlap(const void* a, std::size_t na, const void* b, std::size_t nb) {
  auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return x < y + nb && y < x + na;
}
}  // namespace

TEST_SUITE("pool") {
  PVMM_CASE("pool memory holds data written on one stream and read on another after an event") {
    PVMM_REQUIRE_POOLS();
    auto pool = make_pool();
    auto a = stream::create(0).value();
    auto b = stream::create(0).value();
    auto done = event::create(0).value();
    const std::size_t size = 3 * mib + 4096;
    auto memory = pool.allocate(size, a).value();
    const auto words = pattern(size, 81);
    PVMM_CHECK_OK(a.copy_async(memory.data(), words.data(), size));
    PVMM_CHECK_OK(done.record(a));
    PVMM_CHECK_OK(b.wait(done));
    CHECK(read_back(b, memory.data(), size) == words);
    PVMM_CHECK_OK(memory.free_async(b));
    PVMM_CHECK_OK(b.synchronize());
  }

  PVMM_CASE("usage: reserved >= used, used returns after free and synchronize, high marks reset to current") {
    PVMM_REQUIRE_POOLS();
    auto pool = make_pool();
    auto s = stream::create(0).value();
    CHECK(pool.usage().value().used_current == 0);
    auto x = pool.allocate(8 * mib, s).value();
    auto y = pool.allocate(4 * mib, s).value();
    auto u = pool.usage().value();
    CHECK(u.used_current >= 12 * mib);
    CHECK(u.reserved_current >= u.used_current);
    CHECK(u.used_high >= u.used_current);
    PVMM_CHECK_OK(x.free_async(s));
    PVMM_CHECK_OK(s.synchronize());
    u = pool.usage().value();
    CHECK(u.used_current >= 4 * mib);
    CHECK(u.used_current < 12 * mib);
    CHECK(u.used_high >= 12 * mib);
    PVMM_CHECK_OK(pool.reset_high_marks());
    u = pool.usage().value();
    CHECK(u.used_high == u.used_current);
    CHECK(u.reserved_high == u.reserved_current);
    PVMM_CHECK_OK(y.free_async(s));
    PVMM_CHECK_OK(s.synchronize());
    CHECK(pool.usage().value().used_current == 0);
  }

  PVMM_CASE(
      "release threshold: 0 gives memory back at a synchronize, the maximum keeps it, trim_to gives it back now") {
    PVMM_REQUIRE_POOLS();
    auto s = stream::create(0).value();
    pool_properties keep_all;  // pvmm's default: the maximum
    auto keeping = make_pool(keep_all);
    pool_properties give_back;
    give_back.release_threshold = 0;
    auto giving = make_pool(give_back);
    for (auto* pool : {&keeping, &giving}) {
      auto m = pool->allocate(16 * mib, s).value();
      PVMM_CHECK_OK(m.free_async(s));
    }
    PVMM_CHECK_OK(s.synchronize());
    CHECK(keeping.usage().value().reserved_current >= 16 * mib);
    CHECK(giving.usage().value().reserved_current == 0);
    const auto before = keeping.usage().value().reserved_current;
    PVMM_CHECK_OK(keeping.trim_to(4 * mib));
    const auto kept = keeping.usage().value().reserved_current;
    CHECK(kept >= 4 * mib);  // at least what was asked to stay (drivers give back whole chunks: maybe more)
    CHECK(kept <= before);
    PVMM_CHECK_OK(keeping.trim_to(0));
    CHECK(keeping.usage().value().reserved_current == 0);
  }

  PVMM_CASE("a pool's maximum size is enforced exactly where the capability says so") {
    PVMM_REQUIRE_POOLS();
    pool_properties p;
    p.max_size = 8 * mib;
    if (!caps().pools.max_size) {
      const std::size_t calls = testing::backend_call_count();
      PVMM_CHECK_ERRC(memory_pool::create(p), errc::not_supported);
      CHECK(testing::backend_call_count() == calls);
      return;
    }
    auto pool = make_pool(p);
    auto s = stream::create(0).value();
    auto within = pool.allocate(6 * mib, s);
    PVMM_CHECK_OK(within);
    PVMM_CHECK_ERRC(pool.allocate(8 * mib, s), errc::out_of_memory);
    CHECK(pool.usage().value().reserved_current <= 8 * mib);
  }

  PVMM_CASE("with every reuse policy off, memory whose free is still queued on another stream is not handed out") {
    PVMM_REQUIRE_POOLS();
    pool_properties p;
    p.reuse_follow_event_dependencies = p.reuse_opportunistic = p.reuse_internal_dependencies = false;
    auto pool = make_pool(p);
    auto held = stream::create(0).value();
    auto other = stream::create(0).value();
    gate g;
    auto first = pool.allocate(2 * mib, held).value();
    const void* first_at = first.data();
    PVMM_CHECK_OK(held.launch_host_function(gate::hold, &g));
    PVMM_CHECK_OK(first.free_async(held));  // queued behind the gate
    auto second = pool.allocate(2 * mib, other).value();
    CHECK_FALSE(overlap(first_at, 2 * mib, second.data(), second.size()));
    g.open = true;
    PVMM_CHECK_OK(held.synchronize());
    PVMM_CHECK_OK(second.free_async(other));
    PVMM_CHECK_OK(other.synchronize());
  }

  PVMM_CASE("memory freed on a stream is reused on that stream") {
    PVMM_REQUIRE_POOLS();
    auto pool = make_pool();
    auto s = stream::create(0).value();
    auto first = pool.allocate(2 * mib, s).value();
    void* at = first.data();
    PVMM_CHECK_OK(first.free_async(s));
    auto again = pool.allocate(2 * mib, s).value();
    CHECK(again.data() == at);
    PVMM_CHECK_OK(again.free_async(s));
    PVMM_CHECK_OK(s.synchronize());
  }

  PVMM_CASE("pool access: its own device always, another device once granted") {
    PVMM_REQUIRE_POOLS();
    auto pool = make_pool();
    CHECK(pool.query_access(location::device(0)).value() == access::read_write);
    PVMM_CHECK_OK(pool.set_access({rw(0)}));
    PVMM_CHECK_ERRC(pool.set_access({ro(0)}), errc::invalid_argument);
    PVMM_CHECK_ERRC(pool.set_access({{location::host(), access::read_write}}), errc::invalid_location);
    if (device_count().value() < 2 || !can_access_peer(1, 0).value()) {
      MESSAGE("one device, or no peer access: the cross-device grant is not exercised");
      return;
    }
    auto s = stream::create(1).value();
    PVMM_CHECK_OK(pool.set_access({rw(1)}));
    CHECK(pool.query_access(location::device(1)).value() == access::read_write);
    auto m = pool.allocate(2 * mib, s).value();  // allocated on device 1's stream, used there
    check_round_trip(s, m.data(), 2 * mib, 82);
    PVMM_CHECK_OK(m.free_async(s));
    PVMM_CHECK_OK(s.synchronize());
  }

  PVMM_CASE("the default pool is borrowed: allocate, free, and it stays") {
    PVMM_REQUIRE_POOLS();
    auto s = stream::create(0).value();
    {
      auto pool = memory_pool::default_pool(0).value();
      CHECK_FALSE(pool.owned());
      void* p = pool.allocate_async(mib, s).value();
      PVMM_CHECK_OK(pool.free_async(p, s));
    }
    auto again = memory_pool::default_pool(0).value();
    CHECK(again.native_handle().value == memory_pool::default_pool(0).value().native_handle().value);
    PVMM_CHECK_OK(s.synchronize());
  }

  PVMM_CASE("pools: every bad input has its error") {
    PVMM_REQUIRE_POOLS();
    auto pool = make_pool();
    auto other = make_pool();
    auto s = stream::create(0).value();
    PVMM_CHECK_ERRC(pool.allocate(0, s), errc::invalid_size);
    PVMM_CHECK_ERRC(pool.allocate(mib, stream_ref()), errc::invalid_argument);
    pool_properties bad;
    bad.location = location::device(device_count().value());
    PVMM_CHECK_ERRC(memory_pool::create(bad), errc::invalid_device);
    PVMM_CHECK_ERRC(memory_pool::default_pool(-1), errc::invalid_device);
    void* p = pool.allocate_async(mib, s).value();
    PVMM_CHECK_ERRC(other.free_async(p, s), errc::invalid_argument);  // another pool's
    int on_stack = 0;
    PVMM_CHECK_ERRC(pool.free_async(&on_stack, s), errc::invalid_argument);
    PVMM_CHECK_OK(pool.free_async(p, s));
    PVMM_CHECK_ERRC(pool.free_async(p, s), errc::invalid_argument);  // twice
    pool_allocation empty;
    PVMM_CHECK_ERRC(empty.free_async(s), errc::already_released);
    memory_pool none;
    PVMM_CHECK_ERRC(none.allocate(mib, s), errc::already_released);
    PVMM_CHECK_ERRC(none.usage(), errc::already_released);
    PVMM_CHECK_OK(s.synchronize());
  }

  PVMM_CASE("a pool released with an allocation still live goes when that allocation is freed") {
    PVMM_REQUIRE_POOLS();
    auto s = stream::create(0).value();
    auto pool = make_pool();
    auto m = pool.allocate(mib, s).value();
    const std::size_t pools = query_live_objects().pools;
    PVMM_CHECK_OK(pool.release());
    CHECK(query_live_objects().pools == pools);  // the allocation keeps it
    write_words(m.data(), pattern(mib, 83), 0);
    CHECK(read_words(m.data(), mib, 0) == pattern(mib, 83));
    PVMM_CHECK_OK(m.free_async(s));
    CHECK(query_live_objects().pools == pools - 1);
    PVMM_CHECK_OK(s.synchronize());
  }

  PVMM_CASE("pool_allocation::release frees on the stream it was allocated on, twice is already_released") {
    PVMM_REQUIRE_POOLS();
    auto s = stream::create(0).value();
    auto pool = make_pool();
    auto m = pool.allocate(mib, s).value();
    const std::size_t live = query_live_objects().pool_allocations;
    PVMM_CHECK_OK(m.release());
    CHECK_FALSE(m.valid());
    CHECK(query_live_objects().pool_allocations == live - 1);
    PVMM_CHECK_ERRC(m.release(), errc::already_released);
    PVMM_CHECK_ERRC(m.free_async(s), errc::already_released);
    PVMM_CHECK_OK(s.synchronize());
  }
}  // TEST_SUITE
