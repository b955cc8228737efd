// pool_chunks: in what units a stream-ordered pool reserves device memory, and what a release threshold gives back.
// Every pool is fresh (cudaMemPoolCreate on device 0, pinned device memory, no export handle); sizes are what
// cudaMemPoolAttrReservedMemCurrent reports. One line per measurement:
//   reserve <S>: reserved after one allocation of S (threshold max), after its free + synchronize, after TrimTo(0)
//   grow 1MiB: the allocation counts (of 1 MiB blocks, all live) at which reserved changes, and the new value
//   release <T>: 80 blocks of 1 MiB allocated and freed on a stream, threshold T, synchronize: reserved after it
//   trim <K>: the same 80 blocks freed with the threshold at the maximum, then TrimTo(K): reserved after it
// pvmm's host backend reproduces what this prints (backends/host/pool_blocks.cpp).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "probe_api.hpp"

namespace {
constexpr std::size_t mib = std::size_t{1} << 20;

api_pool fresh_pool(std::uint64_t threshold) {
  API(MemPoolProps) props{};
  props.allocType = API(MemAllocationTypePinned);
  props.location.type = API(MemLocationTypeDevice);
  props.location.id = 0;
  api_pool pool{};
  CHECK(API(MemPoolCreate)(&pool, &props));
  CHECK(API(MemPoolSetAttribute)(pool, API(MemPoolAttrReleaseThreshold), &threshold));
  return pool;
}

double reserved_mib(api_pool pool) {
  std::uint64_t r = 0;
  CHECK(API(MemPoolGetAttribute)(pool, API(MemPoolAttrReservedMemCurrent), &r));
  return static_cast<double>(r) / static_cast<double>(mib);
}
}  // namespace

int main() {
  CHECK(API(SetDevice)(0));
  api_stream s{};
  CHECK(API(StreamCreateWithFlags)(&s, API(StreamNonBlocking)));
  std::printf("%s: pool reservation units and release thresholds\n", API_LABEL);
  for (std::size_t size : {std::size_t{4096}, mib, 2 * mib, 8 * mib, 31 * mib, 32 * mib, 33 * mib, 63 * mib, 65 * mib,
                           100 * mib, 257 * mib}) {
    api_pool pool = fresh_pool(UINT64_MAX);
    void* p = nullptr;
    CHECK(API(MallocFromPoolAsync)(&p, size, pool, s));
    CHECK(API(StreamSynchronize)(s));
    const double held = reserved_mib(pool);
    CHECK(API(FreeAsync)(p, s));
    CHECK(API(StreamSynchronize)(s));
    const double kept = reserved_mib(pool);
    CHECK(API(MemPoolTrimTo)(pool, 0));
    std::printf("reserve %9zu B: %8.2f MiB held, %8.2f kept after free+sync, %6.2f after TrimTo(0)\n", size, held, kept,
                reserved_mib(pool));
    CHECK(API(MemPoolDestroy)(pool));
  }
  {
    api_pool pool = fresh_pool(UINT64_MAX);
    std::vector<void*> live;
    double last = 0;
    std::printf("grow 1MiB:");
    for (int i = 1; i <= 80; ++i) {
      void* p = nullptr;
      CHECK(API(MallocFromPoolAsync)(&p, mib, pool, s));
      live.push_back(p);
      const double r = reserved_mib(pool);
      if (r != last) std::printf(" [%d blocks: %.0f MiB]", i, r);
      last = r;
    }
    std::printf("\n");
    for (void* p : live) CHECK(API(FreeAsync)(p, s));
    CHECK(API(StreamSynchronize)(s));
    CHECK(API(MemPoolDestroy)(pool));
  }
  for (std::uint64_t t : {std::uint64_t{0}, 8 * mib, 32 * mib, 40 * mib, 64 * mib, 79 * mib}) {
    api_pool pool = fresh_pool(UINT64_MAX);
    std::vector<void*> live(80);
    for (void*& p : live) CHECK(API(MallocFromPoolAsync)(&p, mib, pool, s));
    CHECK(API(StreamSynchronize)(s));
    const double before = reserved_mib(pool);
    for (void* p : live) CHECK(API(FreeAsync)(p, s));
    CHECK(API(MemPoolSetAttribute)(pool, API(MemPoolAttrReleaseThreshold), &t));
    CHECK(API(StreamSynchronize)(s));
    std::printf("release threshold %3.0f MiB: %.0f MiB reserved with 80 x 1 MiB live, %.0f MiB after free+sync\n",
                static_cast<double>(t) / static_cast<double>(mib), before, reserved_mib(pool));
    CHECK(API(MemPoolDestroy)(pool));
  }
  for (std::uint64_t keep : {8 * mib, 32 * mib, 40 * mib, 64 * mib}) {
    api_pool pool = fresh_pool(UINT64_MAX);
    std::vector<void*> live(80);
    for (void*& p : live) CHECK(API(MallocFromPoolAsync)(&p, mib, pool, s));
    for (void* p : live) CHECK(API(FreeAsync)(p, s));
    CHECK(API(StreamSynchronize)(s));
    const double before = reserved_mib(pool);
    CHECK(API(MemPoolTrimTo)(pool, keep));
    std::printf("trim to %3.0f MiB: %.0f MiB reserved before, %.0f MiB after\n",
                static_cast<double>(keep) / static_cast<double>(mib), before, reserved_mib(pool));
    CHECK(API(MemPoolDestroy)(pool));
  }
  CHECK(API(StreamDestroy)(s));
  return 0;
}
