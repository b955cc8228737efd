// The caching allocator grows a region in place: a miss that a free block at the end of its region's mapped run
// would fit once grown maps only the chunks it lacks after it (caching_options::grow_in_place). Every case runs
// under the leak check.
#include <cstdint>

#include "caching_support.hpp"

using namespace pvmm;
using namespace pvmm_test;
using namespace caching_test;

PVMM_CASE(
    "caching allocator: a miss grows the free block ending its region in place, mapping only what it lacks, or "
    "stitched (grow_in_place off): without slack, freed blocks' chunks make the new range, nothing is reserved "
    "again") {
  PVMM_REQUIRE_CACHING();
  auto s = stream::create(0).value();  // before the allocator: its cache records events on it
  for (bool grow : {true, false}) {
    INFO("grow_in_place = " << grow);
    auto a = make(true, 0, 0, grow);  // no slack: chunks of cached blocks, never new ones
    const std::size_t c = a.chunk_size();
    void* x = a.allocate(2 * c, s).value();  // three regions of two chunks
    void* y = a.allocate(2 * c, s).value();
    void* z = a.allocate(2 * c, s).value();
    PVMM_CHECK_OK(a.deallocate(x, s));
    PVMM_CHECK_OK(a.deallocate(z, s));
    PVMM_CHECK_OK(s.synchronize());
    const auto before = a.stats();
    CHECK(before.reserved == 6 * c);
    auto big = a.allocate(4 * c, s);  // fits no cached block
    PVMM_REQUIRE_VALUE(big);
    const auto after = a.stats();
    CHECK(after.reserved == 6 * c);  // the other free block's chunks, not new ones
    CHECK(after.chunks_created == before.chunks_created);
    CHECK(after.stitches == before.stitches + 1);
    // Grown: x or z keeps its place and the other's two chunks are mapped after it. Stitched: four chunks mapped
    // into a new range.
    CHECK(after.maps == before.maps + (grow ? 2 : 4));
    CHECK(after.chunks_reused == before.chunks_reused + (grow ? 2 : 4));
    CHECK((*big == x || *big == z) == grow);
    round_trip(*big, 4 * c, s, 5);
    round_trip(y, 2 * c, s, 6);
    PVMM_CHECK_OK(a.deallocate(*big, s));
    PVMM_CHECK_OK(a.deallocate(y, s));
    PVMM_CHECK_OK(a.trim());
    CHECK(a.stats().reserved == 0);
  }
}

PVMM_CASE("caching allocator: a free block with a live block after it is not grown: the miss stitches a new region") {
  PVMM_REQUIRE_CACHING();
  auto s = stream::create(0).value();
  auto a = make(true, 0, 0);
  const std::size_t c = a.chunk_size();
  void* x = a.allocate(3 * c, s).value();
  PVMM_CHECK_OK(a.deallocate(x, s));
  void* front = a.allocate(2 * c, s).value();  // carved from x's region: the last chunk stays free
  void* pin = a.allocate(c, s).value();        // takes it: the region ends in a live block
  PVMM_CHECK_OK(a.deallocate(front, s));
  PVMM_CHECK_OK(s.synchronize());
  const auto before = a.stats();
  auto big = a.allocate(3 * c, s);  // front cannot grow: a new region of front's two chunks and one new
  PVMM_REQUIRE_VALUE(big);
  CHECK(a.stats().maps == before.maps + 3);
  CHECK(a.stats().chunks_reused == before.chunks_reused + 2);
  CHECK(a.stats().reserved == 4 * c);
  round_trip(*big, 3 * c, s, 7);
  round_trip(pin, c, s, 8);
  PVMM_CHECK_OK(a.deallocate(*big, s));
  PVMM_CHECK_OK(a.deallocate(pin, s));
}

PVMM_CASE(
    "caching allocator: a backend failure at any step of a growth holds no more memory and the growth works after") {
  PVMM_REQUIRE_CACHING();
  auto s = stream::create(0).value();
  bool clean_pass = false;
  for (std::size_t n = 1; n < 100 && !clean_pass; ++n) {
    INFO("failing backend call " << n);
    auto a = make(true, 0, 0);
    const std::size_t c = a.chunk_size();
    void* x = a.allocate(2 * c, s).value();
    void* y = a.allocate(c, s).value();  // its own region: its chunk goes to x's growth
    PVMM_CHECK_OK(a.deallocate(x, s));
    PVMM_CHECK_OK(a.deallocate(y, s));
    PVMM_CHECK_OK(s.synchronize());
    const auto before = a.stats();
    const auto calls = testing::backend_call_count();
    testing::fail_nth_backend_call(n);
    auto big = a.allocate(3 * c, s);
    testing::fail_nth_backend_call(0);
    clean_pass = testing::backend_call_count() - calls < n;  // no call was failed: every step was covered
    if (!big) {
      CHECK(big.code() == errc::backend_error);
      CHECK(a.stats().reserved == before.reserved);
      CHECK(a.stats().live == 0);
      big = a.allocate(3 * c, s);  // the same growth, whole this time
      PVMM_REQUIRE_VALUE(big);
    }
    CHECK(*big == x);
    CHECK(a.stats().reserved == 3 * c);
    round_trip(*big, 3 * c, s, 2);
    PVMM_CHECK_OK(a.deallocate(*big, s));
    PVMM_CHECK_OK(a.release());
  }
  CHECK(clean_pass);
}

PVMM_CASE(
    "caching allocator: a small miss extends a free tail when a new region would map as many chunks: the tail's "
    "bytes serve it and the next request fits what is left") {
  PVMM_REQUIRE_CACHING();
  auto s = stream::create(0).value();
  auto a = make(true, 0, 8);
  const std::size_t c = a.chunk_size();
  char* x = static_cast<char*>(a.allocate(c + c / 2, s).value());  // two chunks: a free tail of half a chunk
  const auto before = a.stats();
  void* y = a.allocate(c / 2 + c / 4, s).value();  // one chunk either way: mapped after the tail, not in a new region
  CHECK(y == x + c + c / 2);
  CHECK(a.stats().maps == before.maps + 1);
  void* z = a.allocate(c / 2 + c / 4, s).value();  // what is left of the grown tail holds it: no miss
  CHECK(a.stats().stitches == before.stitches + 1);
  CHECK(a.stats().reserved == 3 * c);  // a region per request held 4 chunks (MoE's expert weights: 1.155x live)
  round_trip(x, c + c / 2, s, 3);
  round_trip(y, c / 2 + c / 4, s, 4);
  round_trip(z, c / 2 + c / 4, s, 5);
  for (void* p : {static_cast<void*>(x), y, z}) PVMM_CHECK_OK(a.deallocate(p, s));
  PVMM_CHECK_OK(a.release());
}

PVMM_CASE("caching allocator: a growth within the slack takes new chunks: cached blocks stay whole for later hits") {
  PVMM_REQUIRE_CACHING();
  auto s = stream::create(0).value();
  auto a = make(true, 0, 100);  // slack: as many bytes again as the live high mark
  const std::size_t c = a.chunk_size();
  void* x = a.allocate(2 * c, s).value();
  void* y = a.allocate(2 * c, s).value();  // a region of its own, cached whole once freed
  PVMM_CHECK_OK(a.deallocate(y, s));
  PVMM_CHECK_OK(a.deallocate(x, s));
  PVMM_CHECK_OK(s.synchronize());
  const auto before = a.stats();
  void* big = a.allocate(3 * c, s).value();  // grows one free block by a chunk: a new one, not one of the other's
  CHECK(a.stats().chunks_created == before.chunks_created + 1);
  CHECK(a.stats().chunks_reused == before.chunks_reused);
  void* again = a.allocate(2 * c, s).value();  // the other block, still whole: no miss (cut, it took a stitch)
  CHECK(a.stats().stitches == before.stitches + 1);
  CHECK(a.stats().reserved == 5 * c);
  round_trip(big, 3 * c, s, 6);
  round_trip(again, 2 * c, s, 7);
  PVMM_CHECK_OK(a.deallocate(big, s));
  PVMM_CHECK_OK(a.deallocate(again, s));
  PVMM_CHECK_OK(a.release());
}
