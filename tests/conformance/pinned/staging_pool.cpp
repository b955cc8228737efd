// The pinned staging pool (pvmm/pinned_pool.hpp) on every backend, from each source the device has: bytes written
// from the host reach device memory and come back, a block is reused once its free's event has completed and never
// before (proved with a stream held by a host function while a copy from the block is pending), trim gives every
// cached block back, exact errors. Every case runs under the leak check.
#include <cstdint>
#include <vector>

#include <pvmm/pinned_pool.hpp>

#include "memory_kinds.hpp"

using namespace pvmm;
using namespace pvmm_test;

// Named: the suite is a unity build, and fill/holds are common names.
namespace pinned_pool_case {

/// The sources this device can make a pinned pool from (the driver pool first where it has one).
std::vector<pinned_pool_options> sources() {
  std::vector<pinned_pool_options> out;
  pinned_pool_options o;
  if (caps().pools.host_location) out.push_back(o);
  if (caps().host_memory.pinned) {
    o.driver_pool = false;
    out.push_back(o);
  }
  return out;
}

const char* name_of(pinned_source s) { return s == pinned_source::driver_pool ? "driver pool" : "pinned allocations"; }

void fill(void* p, std::size_t n, unsigned seed) {
  auto* b = static_cast<unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<unsigned char>((i * 131 + seed) & 0xff);
}
bool holds(const void* p, std::size_t n, unsigned seed) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i)
    if (b[i] != static_cast<unsigned char>((i * 131 + seed) & 0xff)) return false;
  return true;
}

#define PVMM_REQUIRE_PINNED_POOL()                                                               \
  do {                                                                                           \
    PVMM_REQUIRE_POOLS(); /* device memory to copy to */                                         \
    PVMM_REQUIRE_CAPABILITY(!sources().empty(), "host memory pools or page-locked host memory"); \
  } while (0)

}  // namespace pinned_pool_case
using namespace pinned_pool_case;

PVMM_CASE("pinned pool: host-written bytes copy to device memory and back, and a settled block is reused") {
  PVMM_REQUIRE_PINNED_POOL();
  auto s = stream::create(0).value();
  auto device = make_pool();
  for (const auto& options : sources()) {
    auto pool = pinned_pool::create(options).value();
    INFO(name_of(pool.source()));
    CHECK((options.driver_pool ? pool.source() == pinned_source::driver_pool
                               : pool.source() == pinned_source::pinned_allocations));
    const std::size_t n = 300000;  // not a class size: rounds up
    auto d = device.allocate(n, s).value();
    void* p = pool.allocate(n).value();
    CHECK(reinterpret_cast<std::uintptr_t>(p) % 256 == 0);
    fill(p, n, 7);  // from the host at once
    PVMM_CHECK_OK(s.copy_async(d.data(), p, n));
    PVMM_CHECK_OK(pool.deallocate(p, s));
    auto st = pool.stats();
    CHECK(st.live == 0);
    CHECK(st.cached_blocks == 1);
    CHECK(st.reserved >= n);
    CHECK(st.peak_live == n);
    PVMM_CHECK_OK(s.synchronize());             // the copy, and the free's event, have completed
    void* q = pool.allocate(n - 1000).value();  // same class
    CHECK(q == p);
    fill(q, n, 0);
    PVMM_CHECK_OK(s.copy_async(q, d.data(), n));
    PVMM_CHECK_OK(s.synchronize());
    CHECK(holds(q, n, 7));
    PVMM_CHECK_OK(pool.deallocate(q, s));
    st = pool.stats();
    CHECK(st.cache_hits == 1);
    CHECK(st.new_blocks == 1);
    CHECK(st.live_blocks == 0);
    PVMM_CHECK_OK(d.free_async(s));
    PVMM_CHECK_OK(s.synchronize());
    PVMM_CHECK_OK(pool.release());
    PVMM_CHECK_ERRC(pool.release(), errc::already_released);
  }
}

PVMM_CASE("pinned pool: a block freed while a copy from it is pending is not handed out before the copy ends") {
  PVMM_REQUIRE_PINNED_POOL();
  auto a = stream::create(0).value();
  auto b = stream::create(0).value();
  auto device = make_pool();
  for (const auto& options : sources()) {
    auto pool = pinned_pool::create(options).value();
    INFO(name_of(pool.source()));
    const std::size_t n = std::size_t{1} << 20;
    auto da = device.allocate(n, a).value();
    auto db = device.allocate(n, b).value();
    void* p = pool.allocate(n).value();
    fill(p, n, 1);
    gate g;
    PVMM_CHECK_OK(a.launch_host_function(gate::hold, &g));
    PVMM_CHECK_OK(a.copy_async(da.data(), p, n));  // pending: reads p once the gate opens
    PVMM_CHECK_OK(pool.deallocate(p, a));
    void* q = pool.allocate(n).value();  // for stream b
    CHECK(q != p);
    CHECK(pool.stats().passed_over >= 1);
    fill(q, n, 2);  // were q p, the pending copy would read these bytes
    PVMM_CHECK_OK(b.copy_async(db.data(), q, n));
    PVMM_CHECK_OK(pool.deallocate(q, b));
    g.open = true;
    PVMM_CHECK_OK(a.synchronize());
    PVMM_CHECK_OK(b.synchronize());
    std::vector<unsigned char> back(n);
    PVMM_CHECK_OK(a.copy_async(back.data(), da.data(), n));
    PVMM_CHECK_OK(a.synchronize());
    CHECK(holds(back.data(), n, 1));
    PVMM_CHECK_OK(b.copy_async(back.data(), db.data(), n));
    PVMM_CHECK_OK(b.synchronize());
    CHECK(holds(back.data(), n, 2));
    // Both frees have completed: both blocks are reused, no new one is made.
    void* r1 = pool.allocate(n).value();
    void* r2 = pool.allocate(n).value();
    CHECK(((r1 == p && r2 == q) || (r1 == q && r2 == p)));
    CHECK(pool.stats().new_blocks == 2);
    PVMM_CHECK_OK(pool.deallocate(r1, a));
    PVMM_CHECK_OK(pool.deallocate(r2, b));
    PVMM_CHECK_OK(da.free_async(a));
    PVMM_CHECK_OK(db.free_async(b));
    PVMM_CHECK_OK(a.synchronize());
    PVMM_CHECK_OK(b.synchronize());
  }  // the destructor gives the cached blocks back (the leak check sees it)
}

PVMM_CASE(
    "pinned pool: trim gives every cached block back, waiting for pending frees, and a staging loop stays small") {
  PVMM_REQUIRE_PINNED_POOL();
  auto s = stream::create(0).value();
  auto device = make_pool();
  const std::size_t n = 64 << 10;
  auto d = device.allocate(n, s).value();
  for (const auto& options : sources()) {
    auto pool = pinned_pool::create(options).value();
    INFO(name_of(pool.source()));
    for (int i = 0; i < 200; ++i) {  // allocate, write, copy, give back: as many blocks as copies in flight
      void* p = pool.allocate(n).value();
      fill(p, n, static_cast<unsigned>(i));
      PVMM_CHECK_OK(s.copy_async(d.data(), p, n));
      PVMM_CHECK_OK(pool.deallocate(p, s));
    }
    std::vector<unsigned char> back(n);
    PVMM_CHECK_OK(s.copy_async(back.data(), d.data(), n));
    PVMM_CHECK_OK(s.synchronize());
    CHECK(holds(back.data(), n, 199));  // the last copy read what the host wrote last
    auto st = pool.stats();
    CHECK(st.cache_hits + st.new_blocks == 200);
    CHECK(st.reserved == st.new_blocks * n);
    const auto small = pool.allocate(100).value();  // another class: a new block
    gate g;
    PVMM_CHECK_OK(s.launch_host_function(gate::hold, &g));
    PVMM_CHECK_OK(pool.deallocate(small, s));  // pending until the gate opens
    g.open = true;                             // trim waits for it
    PVMM_CHECK_OK(pool.trim());
    st = pool.stats();
    CHECK(st.reserved == 0);
    CHECK(st.cached_blocks == 0);
    CHECK(st.peak_reserved >= n + 4096);
    pool.reset_peaks();
    CHECK(pool.stats().peak_reserved == 0);
    PVMM_CHECK_OK(pool.release());
  }
  PVMM_CHECK_OK(d.free_async(s));
  PVMM_CHECK_OK(s.synchronize());
}

PVMM_CASE("pinned pool: exact errors") {
  PVMM_REQUIRE_PINNED_POOL();
  auto s = stream::create(0).value();
  for (const auto& options : sources()) {
    auto pool = pinned_pool::create(options).value();
    INFO(name_of(pool.source()));
    PVMM_CHECK_ERRC(pool.allocate(0), errc::invalid_size);
    void* p = pool.allocate(4096).value();
    int local = 0;
    PVMM_CHECK_ERRC(pool.deallocate(&local, s), errc::invalid_argument);  // not the pool's
    PVMM_CHECK_ERRC(pool.deallocate(p, stream_ref{}), errc::invalid_argument);
    PVMM_CHECK_ERRC(pool.release(), errc::busy);
    PVMM_CHECK_OK(pool.deallocate(p, s));
    PVMM_CHECK_ERRC(pool.deallocate(p, s), errc::invalid_argument);  // given back already
    PVMM_CHECK_OK(s.synchronize());
    PVMM_CHECK_OK(pool.release());
    PVMM_CHECK_ERRC(pool.allocate(1), errc::already_released);
    PVMM_CHECK_ERRC(pool.deallocate(p, s), errc::already_released);
    PVMM_CHECK_ERRC(pool.trim(), errc::already_released);
    CHECK(pool.device() == -1);
  }
  pinned_pool_options bad;
  bad.device = 99;
  PVMM_CHECK_ERRC(pinned_pool::create(bad), errc::invalid_device);
}
