// pvmm.SymmetricHeap: blocks at the same offset in every rank's slot of a window.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <pvmm/symmetric_heap.hpp>

#include "blocking.hpp"
#include "team_objects.hpp"
#include "views.hpp"

namespace pvmm_py {

using namespace nb::literals;

namespace {

using heap_share = team_share<pvmm::symmetric_heap>;

struct py_heap {
  holder<heap_share> h;
};

}  // namespace

void bind_heap(nb::module_& m) {
  closable(
      nb::class_<py_heap>(m, "SymmetricHeap",
                          "Symmetric allocations over a team: each block is at the same offset in every rank's slot "
                          "(pvmm::symmetric_heap). allocate and free are collective: every rank calls them in the same "
                          "order."))
      .def_static(
          "create",
          [](nb::handle team_obj, std::size_t size, std::size_t max_size, std::int64_t timeout_ms) {
            (void)checked_timeout(timeout_ms, "pvmm.SymmetricHeap.create");
            const py_team& t = nb::cast<const py_team&>(team_obj);
            auto team = t.h.use("SymmetricHeap.create");
            pvmm::heap_options o;
            o.size = size;
            o.max_size = max_size;
            return make_collective<py_heap, pvmm::symmetric_heap>(
                team, [team, o] { return pvmm::symmetric_heap::create(*team, o); });
          },
          "team"_a, "size"_a, "max_size"_a = 0, "timeout_ms"_a = 30000,
          "Collective: a heap over a new window of `size` bytes per rank, growing up to max_size (0: size).")
      .def(
          "allocate",
          [](const py_heap& self, std::size_t size, std::size_t alignment, std::int64_t timeout_ms) {
            auto block = timed_collective(self.h, "pvmm.SymmetricHeap.allocate", "allocate", timeout_ms,
                                          [size, alignment](pvmm::symmetric_heap& heap, std::chrono::milliseconds t) {
                                            return heap.allocate(size, alignment, t);
                                          });
            return block.offset();
          },
          "size"_a, "alignment"_a = pvmm::symmetric_heap::min_alignment, "timeout_ms"_a = 30000,
          "Collective: the offset of a new block (the same on every rank); out_of_memory past max_size.")
      .def(
          "free",
          [](const py_heap& self, std::size_t offset, std::int64_t timeout_ms) {
            timed_collective(
                self.h, "pvmm.SymmetricHeap.free", "free", timeout_ms,
                [offset](pvmm::symmetric_heap& heap, std::chrono::milliseconds t) { return heap.free(offset, t); });
          },
          "offset"_a, "timeout_ms"_a = 30000, "Collective: gives the block at `offset` back.")
      .def(
          "buffer",
          [](const py_heap& self, int rank, std::size_t offset, std::size_t size, const std::string& dtype,
             std::optional<std::vector<std::size_t>> shape) {
            auto pin = self.h.pin("buffer");
            auto* share = static_cast<heap_share*>(pin->keep.get());
            const auto& window = share->object.window();
            void* base = window.peer(rank);
            if (!base)
              raise(pvmm::errc::not_mapped, "pvmm.SymmetricHeap.buffer", "that rank's slot is not mapped here",
                    "rank=" + std::to_string(rank));
            const std::size_t capacity = share->object.statistics().capacity;
            if (offset > capacity || size > capacity - offset)
              raise(pvmm::errc::out_of_range, "pvmm.SymmetricHeap.buffer", "the block lies past the heap's capacity",
                    "offset=" + std::to_string(offset) + ", size=" + std::to_string(size));
            return make_view(std::move(pin), static_cast<unsigned char*>(base) + offset, size, memory_label::device,
                             share->team->device(), view_spec{dtype, std::move(shape), 0, false});
          },
          "rank"_a, "offset"_a, "size"_a, "dtype"_a = "uint8", "shape"_a = nb::none(),
          "Rank `rank`'s copy of the block at `offset` (`size` bytes) as an array; it keeps the heap alive.")
      .def("statistics", [](const py_heap& self) {
        const auto st = self.h.use("statistics")->object.statistics();
        return dict_of("capacity", st.capacity, "max_size", st.max_size, "bytes_in_use", st.bytes_in_use,
                       "peak_bytes_in_use", st.peak_bytes_in_use, "bytes_free", st.bytes_free, "allocations",
                       st.allocation_count, "grow_count", st.grow_count);
      });
}

}  // namespace pvmm_py
