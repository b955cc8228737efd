// pvmm-bench traces: the allocators under test ("sides") that traces_replay.cpp replays its traces through: the raw
// driver pool (cuda: cuMemAllocFromPoolAsync / cuMemFreeAsync on a pool keeping its memory), pvmm's memory_pool,
// pvmm's caching_allocator; where found at configure time PyTorch's caching allocator (libc10) and RMM's pool and
// async resources. RMM's sides build against RMM 26.x from its PyPI wheels (CCCL's resource concepts:
// allocate(stream, bytes, alignment)); the wheels are for this bench only, never needed by CI:
//   pip download --no-deps 'librmm-cu13==26.10.*' 'rapids-logger==0.3.*' -d build/rmm-wheel
//   (cd build/rmm-wheel && for w in *.whl; do unzip -q -o "$w"; done)
//   cmake --preset cuda -DPVMM_RMM_ROOT=$PWD/build/rmm-wheel/librmm && cmake --build build/cuda --target pvmm-bench
// (docs/performance.md, "pvmm-bench traces", says more).
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include <pvmm/pvmm.hpp>

#include "bench.hpp"
#include "traces.hpp"

#if PVMM_BENCH_TORCH
#include "traces_torch.hpp"
#endif
#if PVMM_BENCH_RMM
#include <cuda/stream_ref>
#include <rmm/aligned.hpp>
#include <rmm/mr/cuda_async_memory_resource.hpp>
#include <rmm/mr/cuda_memory_resource.hpp>
#include <rmm/mr/pool_memory_resource.hpp>
#endif

namespace bench {
namespace {

#if PVMM_BENCH_RMM
/// An RMM 26.x resource (CCCL's resource concept: allocate(stream, bytes, alignment)) as a side; RMM's deallocate
/// needs the size and alignment: the side keeps the size, the alignment is RMM's default.
template <class Resource, class Peak>
side rmm_side(const char* name, std::shared_ptr<Resource> mr, Peak peak) {
  auto native = [](const pvmm::stream& s) {
    return cuda::stream_ref(reinterpret_cast<cudaStream_t>(static_cast<std::uintptr_t>(s.native_handle().value)));
  };
  auto sizes = std::make_shared<std::unordered_map<void*, std::size_t>>();
  return {name,
          [mr, native, sizes](std::size_t n, const pvmm::stream& s) {
            void* p = mr->allocate(native(s), n, rmm::CUDA_ALLOCATION_ALIGNMENT);
            (*sizes)[p] = n;
            return p;
          },
          [mr, native, sizes](void* p, const pvmm::stream& s) {
            mr->deallocate(native(s), p, (*sizes)[p], rmm::CUDA_ALLOCATION_ALIGNMENT);
            sizes->erase(p);
          },
          peak};
}
#endif

}  // namespace

std::vector<side> make_sides(pvmm::stream* streams) {
  std::vector<side> sides;
  const int dev = 0;
  (void)streams;
#if PVMM_BENCH_CUDA
  {
    CUmemPoolProps props{};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location = raw_device_memory(dev).location;
    CUmemoryPool made = nullptr;
    CU(cuMemPoolCreate(&made, &props));
    // Destroyed with the side (after the trace synchronized), so the next trace starts without its memory.
    auto pool = std::shared_ptr<CUmemoryPool>(new CUmemoryPool(made), [](CUmemoryPool* p) {
      (void)cuMemPoolDestroy(*p);
      delete p;
    });
    cuuint64_t keep = ~cuuint64_t{0};
    CU(cuMemPoolSetAttribute(*pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep));
    auto native = [](const pvmm::stream& s) {
      return reinterpret_cast<CUstream>(static_cast<std::uintptr_t>(s.native_handle().value));
    };
    sides.push_back(
        {"raw driver pool (cuMemAllocFromPoolAsync)",
         [pool, native](std::size_t n, const pvmm::stream& s) -> void* {
           CUdeviceptr p = 0;
           return cuMemAllocFromPoolAsync(&p, n, *pool, native(s)) == CUDA_SUCCESS ? reinterpret_cast<void*>(p)
                                                                                   : nullptr;
         },
         [native](void* p, const pvmm::stream& s) { CU(cuMemFreeAsync(reinterpret_cast<CUdeviceptr>(p), native(s))); },
         [pool] {
           cuuint64_t v = 0;
           CU(cuMemPoolGetAttribute(*pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &v));
           return std::uint64_t{v};
         }});
  }
#endif
  if (pvmm::query_device(dev).value().capabilities.pools.supported) {
    auto pool = std::make_shared<pvmm::memory_pool>(pvmm::memory_pool::create({}).value());
    sides.push_back(
        {"pvmm memory_pool",
         [pool](std::size_t n, const pvmm::stream& s) { return pool->allocate_async(n, s).value_or(nullptr); },
         [pool](void* p, const pvmm::stream& s) { check(pool->free_async(p, s).has_value(), "free_async"); },
         [pool] { return pool->usage().value().reserved_high; }});
  }
  {
    pvmm::caching_options options;
    if (trace_slack >= 0) options.slack_percent = static_cast<unsigned>(trace_slack);
    options.chunk_size = std::size_t(trace_chunk_mib) << 20;
    auto cache = std::make_shared<pvmm::caching_allocator>(pvmm::caching_allocator::create(options).value());
    auto base = std::make_shared<pvmm::caching_stats>();
    sides.push_back(
        {"pvmm caching_allocator",
         [cache](std::size_t n, const pvmm::stream& s) { return cache->allocate(n, s).value_or(nullptr); },
         [cache](void* p, const pvmm::stream& s) { check(cache->deallocate(p, s).has_value(), "deallocate"); },
         [cache] { return cache->stats().peak_reserved; },
         [cache, base](double pairs) {
           const auto now = cache->stats();
           auto per = [&](std::uint64_t pvmm::caching_stats::*field) {
             return double(now.*field - (*base).*field) / pairs;
           };
           using st = pvmm::caching_stats;
           // A stitch is a reserve, its maps and one grant; the rest are one call each.
           const double calls = per(&st::chunks_created) + per(&st::maps) + per(&st::unmaps) + per(&st::event_records) +
                                per(&st::event_queries) + per(&st::device_waits) + per(&st::host_syncs) +
                                2 * per(&st::stitches);
           return fmt::format(
                      "timed rounds, per alloc+free: driver calls {:.3f}; stitches {:.4f} (chunks created {:.4f}, maps "
                      "{:.4f}), unmaps {:.4f}, event records {:.4f}, queries {:.4f}, device waits {:.4f}, host syncs "
                      "{:.4f}; cache hits {:.3f}",
                      calls, per(&st::stitches), per(&st::chunks_created), per(&st::maps), per(&st::unmaps),
                      per(&st::event_records), per(&st::event_queries), per(&st::device_waits), per(&st::host_syncs),
                      per(&st::cache_hits)) +
                  fmt::format(
                      "\n    time per alloc+free, us: stitches {:.3f}, unmaps {:.3f}, chunks created {:.3f}, event "
                      "records {:.3f}, queries {:.3f}, device waits {:.3f}; ghosts map {:.3f} GiB at the end",
                      per(&st::stitch_ns) / 1e3, per(&st::unmap_ns) / 1e3, per(&st::create_ns) / 1e3,
                      per(&st::event_record_ns) / 1e3, per(&st::event_query_ns) / 1e3, per(&st::device_wait_ns) / 1e3,
                      double(now.ghost_bytes) / (1 << 30));
         },
         [cache, base] { *base = cache->stats(); }});
  }
#if PVMM_BENCH_TORCH
  {
    namespace torch = torch_side;
    torch::init();
    torch::reset_peak();  // this trace's peak only
    auto native = [](const pvmm::stream& s) {
      return reinterpret_cast<void*>(static_cast<std::uintptr_t>(s.native_handle().value));
    };
    // raw_delete frees in the order of the stream the block was allocated on: a block freed on another stream
    // first makes that stream wait for the freeing one (what FSDP2 does instead of record_stream).
    // The cache is emptied with the side, so the next trace starts without its memory.
    auto homes = std::shared_ptr<std::unordered_map<void*, const pvmm::stream*>>(
        new std::unordered_map<void*, const pvmm::stream*>(), [](auto* h) {
          torch::empty_cache();
          delete h;
        });
    auto ev = std::make_shared<pvmm::event>(pvmm::event::create(0).value());
    sides.push_back({"PyTorch CUDACachingAllocator (libc10)",
                     [native, homes](std::size_t n, const pvmm::stream& s) {
                       void* p = torch::allocate(n, native(s));
                       if (p) (*homes)[p] = &s;
                       return p;
                     },
                     [homes, ev](void* p, const pvmm::stream& s) {
                       auto it = homes->find(p);
                       if (it->second != &s) {
                         check(ev->record(s).has_value(), "event record");
                         check(it->second->wait(*ev).has_value(), "stream wait");
                       }
                       homes->erase(it);
                       torch::deallocate(p);
                     },
                     [] { return torch::peak_reserved(); }});
  }
#else
  fmt::print("  PyTorch caching allocator: [pvmm-skip] libc10 was not found at configure time (PVMM_TORCH_ROOT)\n");
#endif
#if PVMM_BENCH_RMM
  {
    // Starts empty and grows as needed from cudaMalloc, so its peak is what the trace asked of it. RMM 26's
    // resources share their state between copies; the side's copy goes with the side.
    auto pool = std::make_shared<rmm::mr::pool_memory_resource>(rmm::mr::cuda_memory_resource{}, 0);
    sides.push_back(rmm_side("RMM pool_memory_resource", pool, [pool] { return std::uint64_t{pool->pool_size()}; }));
    auto async = std::make_shared<rmm::mr::cuda_async_memory_resource>();
    sides.push_back(rmm_side("RMM cuda_async_memory_resource", async, [async] {
      cuuint64_t v = 0;
      CU(cuMemPoolGetAttribute(reinterpret_cast<CUmemoryPool>(async->pool_handle()), CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH,
                               &v));
      return std::uint64_t{v};
    }));
  }
#else
  fmt::print("  RMM pool and async resources: [pvmm-skip] RMM was not found at configure time (PVMM_RMM_ROOT)\n");
#endif
  return sides;
}

}  // namespace bench
