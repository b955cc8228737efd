// A pool's release threshold and reuse policies read back as set, at creation and after, on every backend
// (cuMemPoolGetAttribute / SetAttribute; hip-tests reads and sets both).
#include <limits>
#include <vector>

#include "memory_kinds.hpp"

using namespace pvmm;
using namespace pvmm_test;

namespace {
void check_equal(const pool_attributes& got, const pool_attributes& want) {
  CHECK(got.release_threshold == want.release_threshold);
  CHECK(got.reuse_follow_event_dependencies == want.reuse_follow_event_dependencies);
  CHECK(got.reuse_opportunistic == want.reuse_opportunistic);
  CHECK(got.reuse_internal_dependencies == want.reuse_internal_dependencies);
}
}  // namespace

TEST_SUITE("pool") {
  PVMM_CASE("pool attributes read back as created and as set, a threshold of 0 gives memory back at a synchronize") {
    PVMM_REQUIRE_POOLS();
    pool_properties p;
    p.release_threshold = std::uint64_t{3} << 20;
    p.reuse_follow_event_dependencies = false;
    p.reuse_opportunistic = true;
    p.reuse_internal_dependencies = false;
    auto pool = memory_pool::create(p).value();
    check_equal(pool.attributes().value(), {p.release_threshold, false, true, false});
    // Every combination of the three policies, each read back.
    for (unsigned bits = 0; bits < 8; ++bits) {
      CAPTURE(bits);
      const pool_attributes want{std::uint64_t{bits} << 21, (bits & 1) != 0, (bits & 2) != 0, (bits & 4) != 0};
      PVMM_CHECK_OK(pool.set_attributes(want));
      check_equal(pool.attributes().value(), want);
    }
    PVMM_CHECK_OK(pool.set_release_threshold(std::numeric_limits<std::uint64_t>::max()));
    CHECK(pool.attributes().value().release_threshold == std::numeric_limits<std::uint64_t>::max());

    // The threshold in force decides what a synchronize gives back.
    auto s = stream::create(0).value();
    PVMM_CHECK_OK(pool.allocate(std::size_t{4} << 20, s).value().free_async(s));
    PVMM_CHECK_OK(s.synchronize());
    CHECK(pool.usage().value().reserved_current >= (std::uint64_t{4} << 20));  // kept: threshold is the maximum
    PVMM_CHECK_OK(pool.set_attributes({0, true, true, true}));
    PVMM_CHECK_OK(pool.allocate(4096, s).value().free_async(s));
    PVMM_CHECK_OK(s.synchronize());
    CHECK(pool.usage().value().reserved_current == 0);  // given back at this synchronize

    auto def = memory_pool::default_pool(0).value();
    CHECK(def.attributes().has_value());
    memory_pool empty;
    PVMM_CHECK_ERRC(empty.attributes(), errc::already_released);
    PVMM_CHECK_ERRC(empty.set_attributes({}), errc::already_released);
  }
  // Measured with tools/probes/pool_chunks.cpp (CUDA 13.0 and HIP on NVIDIA, driver 580): the drivers' pools reserve
  // in 32 MiB chunks, and a release threshold at a synchronize gives back whole chunks while more than it is
  // reserved (trim_to keeps at least what it is asked to). The host backend reserved 2 MiB chunks before.
  PVMM_CASE("a pool reserves whole 32 MiB chunks and a release threshold gives back whole chunks, as the drivers do") {
    PVMM_REQUIRE_POOLS();
    constexpr std::uint64_t mib = std::uint64_t{1} << 20, chunk = 32 * mib;
    pool_properties p;  // release threshold: pvmm's default, the maximum
    auto pool = memory_pool::create(p).value();
    auto s = stream::create(0).value();
    auto reserved = [&] { return pool.usage().value().reserved_current; };
    std::vector<void*> blocks;
    std::vector<std::uint64_t> seen;  // reserved after 1, 33 and 65 blocks of 1 MiB
    for (int i = 1; i <= 80; ++i) {
      blocks.push_back(pool.allocate_async(mib, s).value());
      if (i == 1 || i == 33 || i == 65) seen.push_back(reserved());
    }
    CHECK(seen == std::vector<std::uint64_t>{chunk, 2 * chunk, 3 * chunk});
    for (void* b : blocks) PVMM_CHECK_OK(pool.free_async(b, s));
    PVMM_CHECK_OK(pool.set_release_threshold(40 * mib));
    PVMM_CHECK_OK(s.synchronize());
    CHECK(reserved() == chunk);  // 64 MiB is still above 40: one more chunk went
    PVMM_CHECK_OK(pool.set_release_threshold(std::numeric_limits<std::uint64_t>::max()));
    auto big = pool.allocate(33 * mib, s).value();
    CHECK(reserved() == 2 * chunk);
    PVMM_CHECK_OK(big.free_async(s));
    PVMM_CHECK_OK(s.synchronize());
    PVMM_CHECK_OK(pool.trim_to(40 * mib));
    CHECK(reserved() == 2 * chunk);  // trim_to keeps at least 40 MiB: both chunks
    PVMM_CHECK_OK(pool.trim_to(0));
    CHECK(reserved() == 0);
  }

  PVMM_CASE("the default pool's release threshold decides what a synchronize gives back, as a created pool's does") {
    PVMM_REQUIRE_POOLS();
    auto def = memory_pool::default_pool(0).value();
    const std::uint64_t was = def.attributes().value().release_threshold;
    auto s = stream::create(0).value();
    const std::size_t working_set = 8 * mib;
    auto cycle = [&] {  // allocate and free the working set, synchronize: what the pool still holds
      void* p = def.allocate_async(working_set, s).value();
      PVMM_CHECK_OK(def.free_async(p, s));
      PVMM_CHECK_OK(s.synchronize());
      return def.usage().value().reserved_current;
    };
    // The drivers reserve pool memory in chunks larger than a request (32 MiB seen for a 1 MiB one, CUDA 13.0) and give
    // back whole chunks: a threshold under the chunk gives everything back, so the kept case sets one well above it.
    const std::uint64_t above_chunks = 512 * mib;
    PVMM_CHECK_OK(def.set_release_threshold(above_chunks));
    CHECK(def.attributes().value().release_threshold == above_chunks);
    CHECK(cycle() >= working_set);  // kept: the pool holds less than the threshold
    PVMM_CHECK_OK(def.set_release_threshold(0));
    CHECK(cycle() == 0);  // given back at the synchronize
    PVMM_CHECK_OK(def.set_release_threshold(std::numeric_limits<std::uint64_t>::max()));
    CHECK(cycle() >= working_set);
    PVMM_CHECK_OK(def.set_release_threshold(was));  // the process's default pool, as it was
    CHECK(def.attributes().value().release_threshold == was);
    PVMM_CHECK_OK(def.trim_to(0));
  }
}
