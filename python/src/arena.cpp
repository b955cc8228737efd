// pvmm.GrowableArena and pvmm.CachingAllocator: thin wrappers over pvmm::growable_arena and pvmm::caching_allocator
// (include/pvmm/growable_arena.hpp, caching_allocator.hpp), each usable as the PyTorch/CuPy plug-ins' source.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "alloc_sources.hpp"
#include "holder.hpp"
#include "views.hpp"

namespace pvmm_py {

using namespace nb::literals;

namespace {

struct py_arena {
  holder<pvmm::growable_arena> h;  // views hold a share and pin it: free refuses while they live
};
struct py_caching {
  holder<pvmm::caching_allocator> h;
};

nb::dict caching_stats_dict(const pvmm::caching_stats& st) {
  nb::dict d;
#define PVMM_PY_STAT(field) d[#field] = st.field;
  // clang-format off
  PVMM_PY_STAT(reserved)
  PVMM_PY_STAT(live)
  PVMM_PY_STAT(peak_reserved)
  PVMM_PY_STAT(peak_live)
  PVMM_PY_STAT(live_blocks)
  PVMM_PY_STAT(cached_blocks)
  PVMM_PY_STAT(cache_hits)
  PVMM_PY_STAT(stitches)
  PVMM_PY_STAT(chunks_reused)
  PVMM_PY_STAT(waits)
  PVMM_PY_STAT(pressure_retries)
  PVMM_PY_STAT(chunks_created)
  PVMM_PY_STAT(maps)
  PVMM_PY_STAT(unmaps)
  PVMM_PY_STAT(event_records)
  PVMM_PY_STAT(event_queries)
  PVMM_PY_STAT(device_waits)
  PVMM_PY_STAT(host_syncs)
  PVMM_PY_STAT(ghost_bytes)
  PVMM_PY_STAT(stitch_ns)
  PVMM_PY_STAT(unmap_ns)
  PVMM_PY_STAT(create_ns)
  PVMM_PY_STAT(event_record_ns)
  PVMM_PY_STAT(event_query_ns)
  PVMM_PY_STAT(device_wait_ns)
  // clang-format on
#undef PVMM_PY_STAT
  return d;
}

/// A call on the caching allocator in the order of `stream` (a pvmm.Stream or a foreign one), made with the GIL
/// released: call(allocator, stream)'s value, unwrapped.
template <class Call>
auto in_stream_order(const py_caching& c, const char* operation, nb::handle stream, Call call) {
  auto a = c.h.use(operation);
  const stream_use s = stream_of(stream, a->device(), "stream");
  nb::gil_scoped_release release;
  return unwrap(call(*a, s));
}

}  // namespace

void bind_arena(nb::module_& m) {
  closable_source(
      nb::class_<py_arena>(m, "GrowableArena",
                           "Allocations in one reserved range whose physical memory is mapped as they reach it and "
                           "unmapped when the highest ones go; addresses never move (pvmm::growable_arena)."),
      "pvmm.GrowableArena.install_c_allocator",
      "Makes the C entry points (pvmm_torch_alloc/free) allocate from this arena. AlreadyReleasedError once "
      "closed (the source installed stays).",
      "Drops this owner's hold (and the C entry points' if installed); a call in flight on another thread "
      "finishes first, views keep the memory.")
      .def(
          "__init__",
          [](py_arena* self, int device, std::size_t reserve_size, std::size_t chunk_size) {
            pvmm::arena_options o;
            o.device = device;
            o.reserve_size = reserve_size;
            o.chunk_size = chunk_size;
            std::shared_ptr<pvmm::growable_arena> a;
            {
              nb::gil_scoped_release release;
              a = std::make_shared<pvmm::growable_arena>(unwrap(pvmm::growable_arena::create(o)));
            }
            new (self) py_arena{};
            self->h.reset(std::move(a));
          },
          "device"_a = 0, "reserve_size"_a = 0, "chunk_size"_a = 0,
          "reserve_size: the address range reserved up front, all the arena can ever hold (0: the device's total "
          "memory); chunk_size: the unit of physical memory mapped (0: pvmm's default, 64 MiB).")
      .def(
          "allocate",
          [](const py_arena& a, std::size_t size) {
            auto arena = a.h.use("pvmm.GrowableArena.allocate");  // held for the call: close() waits for it
            nb::gil_scoped_release release;                       // may map chunks
            return reinterpret_cast<std::uintptr_t>(unwrap(arena->allocate(size)));
          },
          "size"_a, "An address (int), a multiple of 512; OutOfMemoryError when the reservation cannot hold it.")
      .def(
          "free",
          [](const py_arena& a, std::uintptr_t p) {
            auto arena = use_unviewed(a.h, "pvmm.GrowableArena.free");  // refused while views live: it may unmap
            nb::gil_scoped_release release;
            unwrap(arena->deallocate(reinterpret_cast<void*>(p)));
          },
          "address"_a,
          "Frees an allocation no work in flight uses; the chunks above the highest one left go back. BusyError while "
          "views of the arena live.")
      .def("statistics",
           [](const py_arena& a) {
             auto st = a.h.use("pvmm.GrowableArena.statistics")->stats();
             return dict_of("allocations", st.allocations, "allocated_bytes", st.allocated_bytes, "mapped_bytes",
                            st.mapped_bytes, "peak_mapped_bytes", st.peak_mapped_bytes, "reserved_bytes",
                            st.reserved_bytes, "grows", st.grows, "shrinks", st.shrinks);
           })
      .def_prop_ro(
          "address",
          [](const py_arena& a) {
            return reinterpret_cast<std::uintptr_t>(a.h.use("pvmm.GrowableArena.address")->base());
          },
          "The start of the reserved range.")
      .def(
          "view",
          [](const py_arena& a, std::uintptr_t address, const std::string& dtype,
             std::optional<std::vector<std::size_t>> shape) {
            auto arena = a.h.use("pvmm.GrowableArena.view");
            void* p = reinterpret_cast<void*>(address);
            return make_view(a.h.pin("pvmm.GrowableArena.view"), p, arena->size_of(p), memory_label::device,
                             arena->device(), view_spec{dtype, std::move(shape), 0, false});
          },
          "address"_a, "dtype"_a = "uint8", "shape"_a = nb::none(), "An array over one allocation (keeps the arena).")
      .def("__repr__", [](const py_arena& a) {
        auto arena = a.h.try_use();
        if (!arena) return std::string("<pvmm.GrowableArena closed>");
        auto st = arena->stats();
        return "<pvmm.GrowableArena allocations=" + std::to_string(st.allocations) +
               " mapped_bytes=" + std::to_string(st.mapped_bytes) +
               " reserved_bytes=" + std::to_string(st.reserved_bytes) + ">";
      });
}

void bind_caching(nb::module_& m) {
  closable_source(
      nb::class_<py_caching>(
          m, "CachingAllocator",
          "A caching allocator on VMM (pvmm::caching_allocator): best fit at 512 B, cross-stream reuse "
          "gated on events, idle chunks stitched into contiguous ranges."),
      "pvmm.CachingAllocator.install_c_allocator",
      "Makes the C entry points (pvmm_torch_alloc/free, pvmm_cupy_malloc/free) allocate from this allocator, in "
      "the order of the stream the framework names. AlreadyReleasedError once closed (the source installed stays).",
      "Drops this owner's hold (and the C entry points'); blocks still allocated stay valid.")
      .def(
          "__init__",
          [](py_caching* self, int device, std::size_t chunk_size, std::size_t max_reserved,
             bool wait_for_pending_frees, unsigned slack_percent, std::size_t max_ghost_bytes, bool grow_in_place) {
            pvmm::caching_options o;
            o.device = device;
            o.chunk_size = chunk_size;
            o.max_reserved = max_reserved;
            o.wait_for_pending_frees = wait_for_pending_frees;
            o.slack_percent = slack_percent;
            o.max_ghost_bytes = max_ghost_bytes;
            o.grow_in_place = grow_in_place;
            init_holding(self, pvmm::caching_allocator::create(o));
          },
          "device"_a = 0, "chunk_size"_a = 0, "max_reserved"_a = 0, "wait_for_pending_frees"_a = true,
          "slack_percent"_a = 8, "max_ghost_bytes"_a = 0, "grow_in_place"_a = true,
          "The options of pvmm::caching_options (0: its defaults).")
      .def(
          "allocate",
          [](const py_caching& c, std::size_t size, nb::handle stream) {
            return reinterpret_cast<std::uintptr_t>(in_stream_order(
                c, "pvmm.CachingAllocator.allocate", stream,
                [size](pvmm::caching_allocator& a, pvmm::stream_ref s) { return a.allocate(size, s); }));
          },
          "size"_a, "stream"_a,
          "An address (int) usable in `stream`'s order (a pvmm.Stream, or a foreign stream: an int handle, "
          "__cuda_stream__, torch's or CuPy's), aligned to 512 bytes.")
      .def(
          "free",
          [](const py_caching& c, std::uintptr_t p, nb::handle stream) {
            in_stream_order(c, "pvmm.CachingAllocator.free", stream,
                            [p](pvmm::caching_allocator& a, pvmm::stream_ref s) {
                              return a.deallocate(reinterpret_cast<void*>(p), s);
                            });
          },
          "address"_a, "stream"_a, "Gives a block back in `stream`'s order (the stream of its last use).")
      .def(
          "trim",
          [](const py_caching& c) {
            call_unlocked(c.h, "pvmm.CachingAllocator.trim", [&](auto& o) { return o.trim(); });
          },
          "Gives back every cached block and idle chunk now (waits for their pending frees).")
      .def(
          "stats",
          [](const py_caching& c) { return caching_stats_dict(c.h.use("pvmm.CachingAllocator.stats")->stats()); },
          "reserved, live, their peaks, block counts, the driver calls made by kind and the time spent in them.")
      .def("reset_peaks", [](const py_caching& c) { c.h.use("pvmm.CachingAllocator.reset_peaks")->reset_peaks(); })
      .def(
          "size_of",
          [](const py_caching& c, std::uintptr_t p) {
            return c.h.use("pvmm.CachingAllocator.size_of")->size_of(reinterpret_cast<void*>(p));
          },
          "address"_a, "The bytes asked for by the live block at `address`; 0 when none.")
      .def_prop_ro("chunk_size",
                   [](const py_caching& c) { return c.h.use("pvmm.CachingAllocator.chunk_size")->chunk_size(); })
      .def_prop_ro("device", [](const py_caching& c) { return c.h.use("pvmm.CachingAllocator.device")->device(); })
      .def("__repr__", [](const py_caching& c) {
        auto a = c.h.try_use();
        if (!a) return std::string("<pvmm.CachingAllocator closed>");
        auto st = a->stats();
        return "<pvmm.CachingAllocator live=" + std::to_string(st.live) + " reserved=" + std::to_string(st.reserved) +
               ">";
      });
}

}  // namespace pvmm_py
