// Pool allocation contract cases on every backend: 256-byte alignment of odd sizes with no overlap, same-address
// reuse of a large block on its own stream, and sizes that cannot exist refused with nothing left behind.
#include <cstdint>
#include <limits>
#include <vector>

#include "memory_kinds.hpp"

using namespace pvmm;
using namespace pvmm_test;

namespace {

std::vector<unsigned char> bytes_of(std::size_t size, unsigned seed) {
  std::vector<unsigned char> v(size);
  for (std::size_t i = 0; i < size; ++i) v[i] = static_cast<unsigned char>(seed * 37 + i * 13 + (i >> 8));
  return v;
}
}  // namespace

TEST_SUITE("pool") {
  PVMM_CASE("odd-size pool allocations are 256-byte aligned and do not overlap: each keeps its own bytes") {
    PVMM_REQUIRE_POOLS();
    auto pool = make_pool();
    auto s = stream::create(0).value();
    const std::size_t sizes[] = {1, 255, 257, 4097, mib + 1};
    std::vector<pool_allocation> blocks;
    std::vector<std::vector<unsigned char>> written;
    for (std::size_t size : sizes) {
      auto m = pool.allocate(size, s);
      PVMM_REQUIRE_VALUE(m);
      CHECK_MESSAGE(reinterpret_cast<std::uintptr_t>(m->data()) % 256 == 0, size << " bytes at " << m->data());
      written.push_back(bytes_of(size, static_cast<unsigned>(blocks.size()) + 1));
      PVMM_CHECK_OK(s.copy_async(m->data(), written.back().data(), size));
      blocks.push_back(std::move(*m));
    }
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      std::vector<unsigned char> back(sizes[i]);
      PVMM_CHECK_OK(s.copy_async(back.data(), blocks[i].data(), sizes[i]));
      PVMM_CHECK_OK(s.synchronize());
      CHECK_MESSAGE(back == written[i], "the " << sizes[i] << "-byte block lost its bytes");
    }
    for (auto& m : blocks) PVMM_CHECK_OK(m.free_async(s));
    PVMM_CHECK_OK(s.synchronize());
  }

  PVMM_CASE("a 64 MiB block freed on a stream comes back at the same address on that stream") {
    PVMM_REQUIRE_POOLS();
    auto pool = make_pool();
    auto s = stream::create(0).value();
    const std::size_t size = 64 * mib;
    auto first = pool.allocate(size, s).value();
    void* at = first.data();
    PVMM_CHECK_OK(first.free_async(s));  // not synchronised: stream order alone
    auto again = pool.allocate(size, s).value();
    CHECK(again.data() == at);
    // The reused block is usable: its last MiB holds data.
    check_round_trip(s, static_cast<char*>(again.data()) + size - mib, mib, 91);
    PVMM_CHECK_OK(again.free_async(s));
    PVMM_CHECK_OK(s.synchronize());
    CHECK(pool.usage().value().used_current == 0);
  }

  PVMM_CASE("allocating SIZE_MAX bytes is out_of_memory and leaves the pool as it was") {
    PVMM_REQUIRE_POOLS();
    auto pool = make_pool();
    auto s = stream::create(0).value();
    auto kept = pool.allocate(mib, s).value();  // a live allocation, which must be unaffected
    PVMM_CHECK_OK(s.synchronize());
    const auto before = pool.usage().value();
    const auto live = query_live_objects();
    constexpr std::size_t huge = std::numeric_limits<std::size_t>::max();
    for (std::size_t size : {huge, huge - 255, huge / 2 + 1}) {
      INFO(size << " bytes");
      PVMM_CHECK_ERRC(pool.allocate(size, s), errc::out_of_memory);
      PVMM_CHECK_ERRC(pool.allocate_async(size, s), errc::out_of_memory);
    }
    PVMM_CHECK_OK(s.synchronize());
    const auto after = pool.usage().value();
    CHECK(after.used_current == before.used_current);
    CHECK(after.reserved_current == before.reserved_current);
    CHECK(query_live_objects() == live);
    check_round_trip(s, kept.data(), mib, 92);  // the pool still works
    PVMM_CHECK_OK(kept.free_async(s));
    PVMM_CHECK_OK(s.synchronize());
  }
}  // TEST_SUITE
