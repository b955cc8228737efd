// The growable arena (pvmm/growable_arena.hpp) on every backend: chunks mapped as allocations reach them and given
// back when the highest go, best-fit reuse, exact errors, threads. Every case runs under the leak check.
#include <atomic>
#include <thread>
#include <vector>

#include <pvmm/growable_arena.hpp>

#include "sleep_support.hpp"

using namespace pvmm;
using namespace pvmm_test;

namespace {
growable_arena make_arena(std::size_t chunks) {
  arena_options o;
  o.chunk_size = granule();
  o.reserve_size = chunks * granule();
  return growable_arena::create(o).value();
}
}  // namespace

PVMM_CASE("growable arena: chunks are mapped as allocations reach them and given back when the highest go") {
  PVMM_REQUIRE_SLEEPING();
  auto a = make_arena(8);
  const std::size_t g = granule();
  void* x = a.allocate(100).value();
  CHECK(x == a.base());
  CHECK(a.size_of(x) == 512);
  CHECK(a.stats().mapped_bytes == g);
  void* y = a.allocate(2 * g).value();
  CHECK(a.stats().mapped_bytes == 3 * g);
  sleep_test::sleep_fill(y, 2 * g, 3);
  CHECK(sleep_test::sleep_holds(y, 2 * g, 3));
  PVMM_CHECK_OK(a.deallocate(y));
  CHECK(a.stats().mapped_bytes == g);  // the chunks above x went back
  CHECK(a.stats().shrinks == 1);
  void* z = a.allocate(100).value();  // best fit: right after x
  CHECK(static_cast<char*>(z) == static_cast<char*>(x) + 512);
  PVMM_CHECK_ERRC(a.allocate(8 * g + 1), errc::out_of_memory);
  PVMM_CHECK_ERRC(a.allocate(static_cast<std::size_t>(-1)), errc::out_of_memory);
  PVMM_CHECK_ERRC(a.allocate(0), errc::invalid_size);
  PVMM_CHECK_ERRC(a.deallocate(static_cast<char*>(x) + 1), errc::invalid_argument);
  PVMM_CHECK_ERRC(a.release(), errc::busy);
  PVMM_CHECK_OK(a.deallocate(x));
  PVMM_CHECK_ERRC(a.deallocate(x), errc::invalid_argument);
  PVMM_CHECK_OK(a.deallocate(z));
  CHECK(a.stats().mapped_bytes == 0);
  PVMM_CHECK_OK(a.release());
  PVMM_CHECK_ERRC(a.allocate(1), errc::already_released);
  growable_arena empty;
  CHECK_FALSE(empty.valid());
}

PVMM_CASE("growable arena: a failed grow leaves the arena as it was") {
  PVMM_REQUIRE_SLEEPING();
  auto a = make_arena(8);
  void* x = a.allocate(1).value();
  const auto before = a.stats();
  const std::size_t g = granule();  // outside the sweep: the query is a backend call too
  const std::size_t points = sweep_failures([&] {
    auto p = a.allocate(3 * g);
    if (!p) {
      CHECK(a.stats().mapped_bytes == before.mapped_bytes);
      CHECK(a.stats().allocations == before.allocations);
      return false;
    }
    testing::fail_nth_backend_call(0);  // the sweep is of the grow
    CHECK(a.deallocate(*p));
    return true;
  });
  CHECK(points >= 3);  // the chunks created, mapped, granted
  PVMM_CHECK_OK(a.deallocate(x));
}

PVMM_CASE("growable arena: threads allocate and free at once") {
  PVMM_REQUIRE_SLEEPING();
  auto a = make_arena(16);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        auto p = a.allocate(static_cast<std::size_t>(512 * (1 + (i + t) % 7)));
        if (!p || !a.deallocate(*p)) ++failures;
      }
    });
  for (auto& t : threads) t.join();
  CHECK(failures.load() == 0);
  CHECK(a.stats().allocations == 0);
  CHECK(a.stats().mapped_bytes == 0);
}
