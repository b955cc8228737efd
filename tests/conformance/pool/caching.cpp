// The caching allocator (pvmm/caching_allocator.hpp) on every backend: data round trips, reuse on the home stream,
// blocks split and merged, exact errors, and the shared "any allocator" bodies. Streams: caching_streams.cpp;
// regions, trim and pressure: caching_regions.cpp. Every case runs under the leak check.
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "caching_support.hpp"

using namespace pvmm;
using namespace pvmm_test;
using namespace caching_test;
using namespace std::chrono_literals;

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

  using block = any_allocator::raw_block<caching_pointers>;
  pvmm::status give_back(void* data) { return cache.deallocate(data, on); }
  pvmm::result<block> allocate(std::size_t size) { return block::of(this, cache.allocate(size, on)); }
  static void* address(const block& b) { return b.data; }
  pvmm::status release(block& b) { return b.release(); }
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

TEST_SUITE("pool") { PVMM_ANY_ALLOCATOR_CASES(caching_pointers) }
