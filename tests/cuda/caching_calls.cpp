// The caching allocator's grants on the CUDA backend, without a GPU: the fake driver with cuMemMap and
// cuMemSetAccess recording themselves. A stitch of k chunks (docs/design.md, "Caching allocator") maps each chunk
// at its place in a new range and grants access once, in one cuMemSetAccess over the whole range (CUDA accepts a
// range of several adjacent mappings of one reservation: backend_traits::set_access_spans_mappings): the grant is
// what a stitch pays for on a GPU (tens of microseconds a call), so k chunks must make 1 grant call, not k. A region
// grown in place maps only the chunks it lacks after its last block and grants once over only those.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include <pvmm/pvmm.hpp>

#include "fake_driver.hpp"

namespace {

struct call {
  CUdeviceptr address;
  std::size_t size;
};
std::vector<call> maps;    // cuMemMap, in order
std::vector<call> grants;  // cuMemSetAccess, in order

pvmm::cuda::driver_api recording_table() {
  auto t = pvmm::cuda::fake::table();
  t.cuMemMap = [](CUdeviceptr p, std::size_t size, std::size_t, CUmemGenericAllocationHandle, unsigned long long) {
    maps.push_back({p, size});
    return CUDA_SUCCESS;
  };
  t.cuMemSetAccess = [](CUdeviceptr p, std::size_t size, const CUmemAccessDesc*, std::size_t) {
    grants.push_back({p, size});
    return CUDA_SUCCESS;
  };
  return t;
}

void clear() {
  maps.clear();
  grants.clear();
}

/// The maps since clear() lie back to back from `base` over `bytes`, in order.
bool back_to_back(CUdeviceptr base, std::size_t bytes) {
  CUdeviceptr at = base;
  for (const call& m : maps) {
    if (m.address != at) return false;
    at += m.size;
  }
  return at == base + bytes;
}

/// Since clear(), the block at `p` was stitched from `k` chunks: k maps back to back, one grant over all of them.
void check_stitched(const void* p, std::size_t k, std::size_t chunk) {
  CHECK(maps.size() == k);
  REQUIRE(grants.size() == 1);
  CHECK(grants[0].address == reinterpret_cast<CUdeviceptr>(p));
  CHECK(grants[0].size == k * chunk);
  CHECK(back_to_back(grants[0].address, k * chunk));
}

}  // namespace

TEST_CASE("caching allocator: a block stitched from new chunks is granted in one call over its whole range") {
  const pvmm::cuda::fake::installed_table driver(recording_table());
  auto s = pvmm::stream::create(0).value();
  pvmm::caching_options o;
  o.grow_in_place = false;  // else each request grows the last one's region (the last case)
  auto cache = pvmm::caching_allocator::create(o).value();
  const std::size_t chunk = cache.chunk_size();
  for (std::size_t k : {std::size_t{1}, std::size_t{3}, std::size_t{7}}) {
    CAPTURE(k);
    clear();
    void* p = cache.allocate(k * chunk - 1000, s).value();
    check_stitched(p, k, chunk);
    REQUIRE(cache.deallocate(p, s).has_value());
  }
  CHECK(cache.stats().stitches == 3);
  REQUIRE(cache.release().has_value());
  REQUIRE(s.release().has_value());
}

TEST_CASE("caching allocator: chunks harvested from cached blocks of several regions are granted in one call") {
  const pvmm::cuda::fake::installed_table driver(recording_table());
  auto s = pvmm::stream::create(0).value();
  pvmm::caching_options o;
  o.slack_percent = 0;      // a miss cuts chunks out of cached blocks before it creates any
  o.grow_in_place = false;  // else one of them grows by the others' chunks (the next case)
  auto cache = pvmm::caching_allocator::create(o).value();
  const std::size_t chunk = cache.chunk_size();
  constexpr std::size_t k = 4;
  std::vector<void*> singles;
  for (std::size_t i = 0; i < k; ++i) singles.push_back(cache.allocate(chunk, s).value());  // a region each
  for (void* p : singles) REQUIRE(cache.deallocate(p, s).has_value());
  const auto before = cache.stats();
  CHECK(before.stitches == k);
  clear();
  void* big = cache.allocate(k * chunk, s).value();  // fits no cached block: their k chunks, stitched
  const auto after = cache.stats();
  CHECK(after.stitches == before.stitches + 1);
  CHECK(after.chunks_reused == before.chunks_reused + k);
  CHECK(after.chunks_created == before.chunks_created);
  check_stitched(big, k, chunk);
  REQUIRE(cache.deallocate(big, s).has_value());
  REQUIRE(cache.release().has_value());
  REQUIRE(s.release().has_value());
}

TEST_CASE("caching allocator: a region grown in place maps only the chunks it lacks, one grant over only them") {
  const pvmm::cuda::fake::installed_table driver(recording_table());
  auto s = pvmm::stream::create(0).value();
  auto cache = pvmm::caching_allocator::create({}).value();
  const std::size_t chunk = cache.chunk_size();
  void* p = cache.allocate(2 * chunk, s).value();
  REQUIRE(cache.deallocate(p, s).has_value());
  const auto before = cache.stats();
  clear();
  void* big = cache.allocate(5 * chunk - 1000, s).value();  // p's block, grown by three chunks mapped after it
  CHECK(big == p);
  const auto at = reinterpret_cast<CUdeviceptr>(p) + 2 * chunk;
  CHECK(maps.size() == 3);
  REQUIRE(grants.size() == 1);
  CHECK(grants[0].address == at);
  CHECK(grants[0].size == 3 * chunk);
  CHECK(back_to_back(at, 3 * chunk));
  CHECK(cache.stats().stitches == before.stitches + 1);
  CHECK(cache.stats().maps == before.maps + 3);
  REQUIRE(cache.deallocate(big, s).has_value());
  REQUIRE(cache.release().has_value());
  REQUIRE(s.release().has_value());
}
