// The allocators behind PyTorch's and CuPy's plug-in interfaces: pvmm.GrowableArena, pvmm.SleepingAllocator, and
// the C entry points (pvmm_torch_alloc/free, pvmm_cupy_malloc/free) that serve the installed source.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "arena.hpp"
#include "sleeping.hpp"
#include "views.hpp"

namespace pvmm_py {

using namespace nb::literals;

namespace {

struct py_sleeping {
  holder<sleeping_allocator> h;  // views hold a share: close() with views left keeps the memory
};
struct py_arena {
  holder<growable_arena> h;  // views hold a share, as the sleeping allocator's
};
// The allocator the C entry points below serve: one at a time, the last installed (from Python by pvmm.allocators).
// Global because PyTorch and CuPy load the entry points by name and pass them no context. PyTorch calls them from
// any thread while Python may install or close a source: each call copies what it needs under c_source_lock and
// allocates or frees outside it (the lock is never held across a driver call or user code).
struct c_source {
  std::shared_ptr<pvmm::memory_pool> pool;
  std::shared_ptr<sleeping_allocator> sleeping;
  std::shared_ptr<growable_arena> arena;
  std::string tag = "default";  // what the sleeping allocator tags new allocations with
};
// Sources that served the entry points and may still hold allocations made through them: PyTorch may free a segment
// after another source was installed (a MemPool outliving its turn) or after Python closed the source's owner. The
// free must reach the source that made it, alive: arenas and sleeping allocators stay here until they are neither
// installed nor holding allocations. A pool cannot tell its pointers from another's: frees that no arena or sleeping
// allocator owns go to the last pool installed.
struct c_retained {
  std::vector<std::shared_ptr<growable_arena>> arenas;
  std::vector<std::shared_ptr<sleeping_allocator>> sleepers;
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

/// Moves the retained sources of `list` that are not `installed` and hold no allocations into `gone` (released by
/// the caller after the lock).
template <class T>
void prune(std::vector<std::shared_ptr<T>>& list, const std::shared_ptr<T>& installed,
           std::vector<std::shared_ptr<T>>& gone) {
  for (auto it = list.begin(); it != list.end();) {
    if (*it != installed && (*it)->statistics().allocations == 0) {
      gone.push_back(std::move(*it));
      it = list.erase(it);
    } else {
      ++it;
    }
  }
}
/// Drops the retained sources nothing needs any more (after a free, an install or a close).
void prune_c_sources() {
  std::vector<std::shared_ptr<growable_arena>> arenas;  // released after the lock
  std::vector<std::shared_ptr<sleeping_allocator>> sleepers;
  std::lock_guard<std::mutex> guard(c_source_lock);
  prune(c_kept.arenas, c_installed.arena, arenas);
  prune(c_kept.sleepers, c_installed.sleeping, sleepers);
}

template <class T>
void keep(std::vector<std::shared_ptr<T>>& list, const std::shared_ptr<T>& source) {
  if (std::find(list.begin(), list.end(), source) == list.end()) list.push_back(source);
}
template <class T>
void install_c_source(const std::shared_ptr<T>& source) {
  {
    c_source old;  // released after the lock: the last share of a source may go here
    std::lock_guard<std::mutex> guard(c_source_lock);
    old = std::move(c_installed);
    c_installed = c_source{};
    c_installed.tag = old.tag;
    if constexpr (std::is_same_v<T, pvmm::memory_pool>) c_installed.pool = c_kept.last_pool = source;
    if constexpr (std::is_same_v<T, sleeping_allocator>) keep(c_kept.sleepers, c_installed.sleeping = source);
    if constexpr (std::is_same_v<T, growable_arena>) keep(c_kept.arenas, c_installed.arena = source);
  }
  prune_c_sources();
}
/// Uninstalls `source` if it is the one installed (its owner is closing); it stays while it holds allocations.
template <class T>
void uninstall_c_source(const std::shared_ptr<T>& source) {
  {
    std::shared_ptr<T> old;  // released after the lock
    std::lock_guard<std::mutex> guard(c_source_lock);
    if constexpr (std::is_same_v<T, sleeping_allocator>) {
      if (c_installed.sleeping == source) old = std::move(c_installed.sleeping);
    }
    if constexpr (std::is_same_v<T, growable_arena>) {
      if (c_installed.arena == source) old = std::move(c_installed.arena);
    }
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

}  // namespace pvmm_py

// C entry points for PyTorch's CUDAPluggableAllocator and CuPy's CFunctionAllocator (python/pvmm/allocators.py).
extern "C" {
__attribute__((visibility("default"))) void* pvmm_torch_alloc(std::size_t size, int device, void* stream) {
  const pvmm_py::c_source source = pvmm_py::installed_c_source();
  if (source.arena) {
    auto p = source.arena->allocate(size);
    return p ? *p : nullptr;
  }
  if (source.sleeping) {
    auto p = source.sleeping->allocate(size, source.tag);
    return p ? *p : nullptr;
  }
  if (!source.pool) return nullptr;
  auto p = source.pool->allocate_async(size, pvmm_py::foreign_stream(stream, device));
  return p ? *p : nullptr;
}
__attribute__((visibility("default"))) void pvmm_torch_free(void* pointer, std::size_t, int device, void* stream) {
  const pvmm_py::c_retained kept = pvmm_py::retained_c_sources();
  if (auto arena = pvmm_py::owner_of(kept.arenas, pointer)) {
    // The arena unmaps what no allocation reaches any more: the freeing stream's work must be done (PyTorch frees
    // segments rarely: on empty_cache, or to retry an allocation that failed).
    if (stream || !pvmm_py::backend_is("host")) (void)pvmm_py::foreign_stream(stream, device).synchronize();
    (void)arena->free(pointer);
  } else if (auto sleeping = pvmm_py::owner_of(kept.sleepers, pointer)) {
    (void)sleeping->free(pointer);
  } else if (kept.last_pool) {
    (void)kept.last_pool->free_async(pointer, pvmm_py::foreign_stream(stream, device));
  }
  pvmm_py::prune_c_sources();
}
// CuPy's CFunctionAllocator: `param` is the stream handle the allocator was made for. Pools only.
__attribute__((visibility("default"))) void* pvmm_cupy_malloc(void* param, std::size_t size, int device) {
  const auto pool = pvmm_py::installed_c_source().pool;
  if (!pool) return nullptr;
  auto p = pool->allocate_async(size, pvmm_py::foreign_stream(param, device));
  return p ? *p : nullptr;
}
__attribute__((visibility("default"))) void pvmm_cupy_free(void* param, void* pointer, int device) {
  if (const auto pool = pvmm_py::installed_c_source().pool)
    (void)pool->free_async(pointer, pvmm_py::foreign_stream(param, device));
}
}

namespace pvmm_py {

void install_c_pool(const std::shared_ptr<pvmm::memory_pool>& pool) { install_c_source(pool); }

void bind_allocators(nb::module_& m) {
  // ---- the growable arena (PyTorch's allocator on VMM) ----
  nb::class_<py_arena>(m, "GrowableArena",
                       "Allocations in one reserved range whose physical memory is mapped as they reach it and "
                       "unmapped when the highest ones go; addresses never move.")
      .def(
          "__init__",
          [](py_arena* self, int device, std::size_t reserve_size, std::size_t chunk_size) {
            std::unique_ptr<growable_arena> a;
            {
              nb::gil_scoped_release release;
              a = unwrap(growable_arena::create(device, reserve_size, chunk_size));
            }
            new (self) py_arena{};
            self->h.reset(std::shared_ptr<growable_arena>(std::move(a)));
          },
          "device"_a = 0, "reserve_size"_a = 0, "chunk_size"_a = 0,
          "reserve_size: the address range reserved up front, all the arena can ever hold (0: the device's total "
          "memory); chunk_size: the unit of physical memory mapped (0: pvmm's default, 64 MiB).")
      .def(
          "allocate",
          [](const py_arena& a, std::size_t size) {
            auto arena = a.h.use("allocate");
            nb::gil_scoped_release release;  // may map chunks
            return reinterpret_cast<std::uintptr_t>(unwrap(arena->allocate(size)));
          },
          "size"_a, "An address (int), a multiple of 512; out_of_memory when the reservation cannot hold it.")
      .def(
          "free",
          [](const py_arena& a, std::uintptr_t p) {
            auto arena = a.h.use("free");
            nb::gil_scoped_release release;  // may unmap chunks
            unwrap(arena->free(reinterpret_cast<void*>(p)));
          },
          "address"_a, "Frees an allocation no work in flight uses; the chunks above the highest one left go back.")
      .def("statistics",
           [](const py_arena& a) {
             auto st = a.h.use("statistics")->statistics();
             nb::dict d;
             d["allocations"] = st.allocations;
             d["allocated_bytes"] = st.allocated_bytes;
             d["mapped_bytes"] = st.mapped_bytes;
             d["peak_mapped_bytes"] = st.peak_mapped_bytes;
             d["reserved_bytes"] = st.reserved_bytes;
             d["grows"] = st.grows;
             d["shrinks"] = st.shrinks;
             return d;
           })
      .def_prop_ro(
          "address", [](const py_arena& a) { return reinterpret_cast<std::uintptr_t>(a.h.use("address")->base()); },
          "The start of the reserved range.")
      .def(
          "view",
          [](const py_arena& a, std::uintptr_t address, const std::string& dtype,
             std::optional<std::vector<std::size_t>> shape) {
            auto arena = a.h.use("view");
            void* p = reinterpret_cast<void*>(address);
            return make_view(a.h.pin("view"), p, arena->size_of(p), memory_label::device, arena->device(),
                             view_spec{dtype, std::move(shape), 0, false});
          },
          "address"_a, "dtype"_a = "uint8", "shape"_a = nb::none(), "An array over one allocation (keeps the arena).")
      .def(
          "install_c_allocator", [](const py_arena& a) { install_c_source(a.h.use("install")); },
          "Makes the C entry points (pvmm_torch_alloc/free) allocate from this arena.")
      .def_prop_ro("closed", [](const py_arena& a) { return a.h.closed(); })
      .def(
          "close",
          [](py_arena& a) {
            auto share = a.h.take();
            if (share) uninstall_c_source(share);
            release_without_gil(std::move(share));
          },
          "Drops this owner's hold (and the C entry points' if installed); views keep the memory.")
      .def(
          "__enter__", [](py_arena& self) -> py_arena& { return self; }, nb::rv_policy::reference)
      .def("__exit__",
           [](py_arena& a, nb::args) {
             auto share = a.h.take();
             if (share) uninstall_c_source(share);
             release_without_gil(std::move(share));
           })
      .def("__repr__", [](const py_arena& a) {
        auto arena = a.h.try_use();
        if (!arena) return std::string("<pvmm.GrowableArena closed>");
        auto st = arena->statistics();
        return "<pvmm.GrowableArena allocations=" + std::to_string(st.allocations) +
               " mapped_bytes=" + std::to_string(st.mapped_bytes) +
               " reserved_bytes=" + std::to_string(st.reserved_bytes) + ">";
      });

  // ---- the sleeping allocator ----
  nb::class_<py_sleeping>(m, "SleepingAllocator",
                          "Tagged allocations whose physical memory sleep() gives back, keeping their addresses.")
      .def(
          "__init__",
          [](py_sleeping* self, int device) {
            auto a = std::shared_ptr<sleeping_allocator>(unwrap(sleeping_allocator::create(device)));
            new (self) py_sleeping{};
            self->h.reset(std::move(a));
          },
          "device"_a = 0)
      .def(
          "allocate",
          [](const py_sleeping& s, std::size_t size, const std::string& tag) {
            return reinterpret_cast<std::uintptr_t>(unwrap(s.h.use("allocate")->allocate(size, tag)));
          },
          "size"_a, "tag"_a = "default", "An address (int) that stays the same across sleep and wake.")
      .def(
          "free",
          [](const py_sleeping& s, std::uintptr_t p) { unwrap(s.h.use("free")->free(reinterpret_cast<void*>(p))); },
          "address"_a)
      .def(
          "sleep",
          [](const py_sleeping& s, const std::vector<std::string>& tags, bool offload) {
            auto a = s.h.use("sleep");
            nb::gil_scoped_release release;
            unwrap(a->sleep(tags, offload));
          },
          "tags"_a = std::vector<std::string>{}, "offload"_a = true,
          "Copies (offload=True) or discards the tagged allocations, then gives their physical memory back.")
      .def(
          "wake",
          [](const py_sleeping& s, const std::vector<std::string>& tags) {
            auto a = s.h.use("wake");
            nb::gil_scoped_release release;
            unwrap(a->wake(tags));
          },
          "tags"_a = std::vector<std::string>{}, "Maps new memory at the same addresses; restores offloaded contents.")
      .def(
          "statistics",
          [](const py_sleeping& s, std::optional<std::string> tag) {
            auto st = s.h.use("statistics")->statistics(tag);
            nb::dict d;
            d["allocations"] = st.allocations;
            d["reserved_bytes"] = st.reserved_bytes;
            d["resident_bytes"] = st.resident_bytes;
            d["offloaded_bytes"] = st.offloaded_bytes;
            d["asleep"] = st.asleep;
            return d;
          },
          "tag"_a = nb::none())
      .def(
          "view",
          [](const py_sleeping& s, std::uintptr_t address, const std::string& dtype,
             std::optional<std::vector<std::size_t>> shape) {
            auto a = s.h.use("view");
            void* p = reinterpret_cast<void*>(address);
            const std::size_t size = a->size_of(p);
            return make_view(s.h.pin("view"), p, size, memory_label::device, a->device(),
                             view_spec{dtype, std::move(shape), 0, false});
          },
          "address"_a, "dtype"_a = "uint8", "shape"_a = nb::none())
      .def(
          "use_tag",
          [](const py_sleeping&, const std::string& tag) {
            std::lock_guard<std::mutex> guard(c_source_lock);
            c_installed.tag = tag;
          },
          "The tag the C entry points (PyTorch's MemPool) give new allocations.")
      .def(
          "install_c_allocator", [](const py_sleeping& s) { install_c_source(s.h.use("install")); },
          "Makes the C entry points (pvmm_torch_alloc/free) allocate from this allocator, with use_tag's tag.")
      .def("close",
           [](py_sleeping& s) {
             auto share = s.h.take();
             if (share) uninstall_c_source(share);
             release_without_gil(std::move(share));
           })
      .def(
          "__enter__", [](py_sleeping& self) -> py_sleeping& { return self; }, nb::rv_policy::reference)
      .def("__exit__",
           [](py_sleeping& s, nb::args) {
             auto share = s.h.take();
             if (share) uninstall_c_source(share);
             release_without_gil(std::move(share));
           })
      .def("__repr__", [](const py_sleeping& s) {
        auto a = s.h.try_use();
        if (!a) return std::string("<pvmm.SleepingAllocator closed>");
        auto st = a->statistics(std::nullopt);
        return "<pvmm.SleepingAllocator allocations=" + std::to_string(st.allocations) +
               " resident_bytes=" + std::to_string(st.resident_bytes) + " asleep=" + std::to_string(st.asleep) + ">";
      });
}

}  // namespace pvmm_py
