// The allocators behind PyTorch's and CuPy's plug-in interfaces: the C entry points (pvmm_torch_alloc/free,
// pvmm_cupy_malloc/free) and the source they serve. The classes are thin wrappers over the library's allocators
// (arena.cpp: GrowableArena, CachingAllocator; sleeping.cpp: SleepingAllocator).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "alloc_sources.hpp"

namespace pvmm_py {

namespace {

// The allocator the C entry points serve: one at a time, the last installed (from Python by pvmm.allocators).
// Global because PyTorch and CuPy load the entry points by name and pass them no context. PyTorch calls them from
// any thread while Python may install or close a source: each call copies what it needs under c_source_lock and
// allocates or frees outside it (the lock is never held across a driver call or user code).
struct c_source {
  std::shared_ptr<pvmm::memory_pool> pool;
  std::shared_ptr<pvmm::sleeping_allocator> sleeping;
  std::shared_ptr<pvmm::growable_arena> arena;
  std::shared_ptr<pvmm::caching_allocator> caching;
};
// Sources that served the entry points and may still hold allocations made through them: PyTorch may free a segment
// after another source was installed (a MemPool outliving its turn) or after Python closed the source's owner. The
// free must reach the source that made it, alive: arenas, sleeping and caching allocators stay here until they are
// neither installed nor holding allocations. A pool cannot tell its pointers from another's: frees that no other
// source owns go to the last pool installed.
struct c_retained {
  std::vector<std::shared_ptr<pvmm::growable_arena>> arenas;
  std::vector<std::shared_ptr<pvmm::sleeping_allocator>> sleepers;
  std::vector<std::shared_ptr<pvmm::caching_allocator>> cachings;
  std::shared_ptr<pvmm::memory_pool> last_pool;
};
std::mutex c_source_lock;
c_source c_installed;
c_retained c_kept;

c_source installed_c_source() {
  std::lock_guard<std::mutex> guard(c_source_lock);
  return c_installed;
}
c_retained retained_c_sources() {
  std::lock_guard<std::mutex> guard(c_source_lock);
  return c_kept;
}

std::size_t allocations_of(const pvmm::growable_arena& a) { return a.stats().allocations; }
std::size_t allocations_of(const pvmm::sleeping_allocator& a) { return a.stats().allocations; }
std::size_t allocations_of(const pvmm::caching_allocator& a) { return a.stats().live_blocks; }

/// Moves the retained sources of `list` that are not `installed` and hold no allocations into `gone` (released by
/// the caller after the lock).
template <class T>
void prune(std::vector<std::shared_ptr<T>>& list, const std::shared_ptr<T>& installed,
           std::vector<std::shared_ptr<T>>& gone) {
  for (auto it = list.begin(); it != list.end();) {
    if (*it != installed && allocations_of(**it) == 0) {
      gone.push_back(std::move(*it));
      it = list.erase(it);
    } else {
      ++it;
    }
  }
}
/// Drops the retained sources nothing needs any more (after a free, an install or a close).
void prune_c_sources() {
  c_retained gone;  // released after the lock
  std::lock_guard<std::mutex> guard(c_source_lock);
  prune(c_kept.arenas, c_installed.arena, gone.arenas);
  prune(c_kept.sleepers, c_installed.sleeping, gone.sleepers);
  prune(c_kept.cachings, c_installed.caching, gone.cachings);
}

template <class T>
void keep(std::vector<std::shared_ptr<T>>& list, const std::shared_ptr<T>& source) {
  if (std::find(list.begin(), list.end(), source) == list.end()) list.push_back(source);
}
template <class Set>
void install(Set&& set) {
  {
    c_source old;  // released after the lock: the last share of a source may go here
    std::lock_guard<std::mutex> guard(c_source_lock);
    old = std::move(c_installed);
    c_installed = c_source{};
    set();
  }
  prune_c_sources();
}
/// The retained source of `list` that owns `pointer`, or none.
template <class T>
std::shared_ptr<T> owner_of(const std::vector<std::shared_ptr<T>>& list, void* pointer) {
  for (const auto& source : list)
    if (source->size_of(pointer) != 0) return source;
  return nullptr;
}

pvmm::stream_ref foreign_stream(void* s, int device) {
  std::uint64_t h = reinterpret_cast<std::uintptr_t>(s);
  if (h == 0 && !backend_is("host")) h = 1;  // CUDA's and HIP's legacy default stream (cudaStreamLegacy)
  return pvmm::stream_ref(pvmm::stream_handle{h}, device);
}

}  // namespace

void install_c_pool(const std::shared_ptr<pvmm::memory_pool>& pool) {
  install([&] { c_installed.pool = c_kept.last_pool = pool; });
}
void install_c_source(const std::shared_ptr<pvmm::growable_arena>& source) {
  install([&] { keep(c_kept.arenas, c_installed.arena = source); });
}
void install_c_source(const std::shared_ptr<pvmm::sleeping_allocator>& source) {
  install([&] { keep(c_kept.sleepers, c_installed.sleeping = source); });
}
void install_c_source(const std::shared_ptr<pvmm::caching_allocator>& source) {
  install([&] { keep(c_kept.cachings, c_installed.caching = source); });
}
void uninstall_c_source(const std::shared_ptr<void>& source) {
  {
    c_source old;  // released after the lock
    std::lock_guard<std::mutex> guard(c_source_lock);
    if (c_installed.sleeping == source) old.sleeping = std::move(c_installed.sleeping);
    if (c_installed.arena == source) old.arena = std::move(c_installed.arena);
    if (c_installed.caching == source) old.caching = std::move(c_installed.caching);
  }
  prune_c_sources();
}

void bind_allocators(nb::module_& m) {
  bind_arena(m);
  bind_caching(m);
  bind_sleeping(m);
}

}  // namespace pvmm_py

// C entry points for PyTorch's CUDAPluggableAllocator and CuPy's CFunctionAllocator (python/pvmm/allocators.py).
namespace {
/// What the C entry points answer for an allocation: its address, or null (they raise nothing).
void* or_null(const pvmm::result<void*>& allocated) { return allocated ? *allocated : nullptr; }
}  // namespace

extern "C" {
__attribute__((visibility("default"))) void* pvmm_torch_alloc(std::size_t size, int device, void* stream) {
  const pvmm_py::c_source source = pvmm_py::installed_c_source();
  if (source.arena) return or_null(source.arena->allocate(size));
  if (source.sleeping)
    return or_null(source.sleeping->allocate(size));  // the allocator's current tag (pvmm.allocators.tag)
  if (source.caching) return or_null(source.caching->allocate(size, pvmm_py::foreign_stream(stream, device)));
  if (!source.pool) return nullptr;
  return or_null(source.pool->allocate_async(size, pvmm_py::foreign_stream(stream, device)));
}
__attribute__((visibility("default"))) void pvmm_torch_free(void* pointer, std::size_t, int device, void* stream) {
  const pvmm_py::c_retained kept = pvmm_py::retained_c_sources();
  if (auto arena = pvmm_py::owner_of(kept.arenas, pointer)) {
    // The arena unmaps what no allocation reaches any more: the freeing stream's work must be done (PyTorch frees
    // segments rarely: on empty_cache, or to retry an allocation that failed).
    if (stream || !pvmm_py::backend_is("host")) (void)pvmm_py::foreign_stream(stream, device).synchronize();
    (void)arena->deallocate(pointer);
  } else if (auto sleeping = pvmm_py::owner_of(kept.sleepers, pointer)) {
    (void)sleeping->deallocate(pointer);
  } else if (auto caching = pvmm_py::owner_of(kept.cachings, pointer)) {
    (void)caching->deallocate(pointer, pvmm_py::foreign_stream(stream, device));  // in the stream's order
  } else if (kept.last_pool) {
    (void)kept.last_pool->free_async(pointer, pvmm_py::foreign_stream(stream, device));
  }
  pvmm_py::prune_c_sources();
}
// CuPy's CFunctionAllocator: `param` is the stream handle the allocator was made for. Pools and caching allocators.
__attribute__((visibility("default"))) void* pvmm_cupy_malloc(void* param, std::size_t size, int device) {
  const auto source = pvmm_py::installed_c_source();
  if (source.caching) return or_null(source.caching->allocate(size, pvmm_py::foreign_stream(param, device)));
  if (!source.pool) return nullptr;
  return or_null(source.pool->allocate_async(size, pvmm_py::foreign_stream(param, device)));
}
__attribute__((visibility("default"))) void pvmm_cupy_free(void* param, void* pointer, int device) {
  const pvmm_py::c_retained kept = pvmm_py::retained_c_sources();
  if (auto caching = pvmm_py::owner_of(kept.cachings, pointer)) {
    (void)caching->deallocate(pointer, pvmm_py::foreign_stream(param, device));
  } else if (kept.last_pool) {
    (void)kept.last_pool->free_async(pointer, pvmm_py::foreign_stream(param, device));
  }
  pvmm_py::prune_c_sources();
}
}
