// Stream-ordered pools: pvmm.MemoryPool (allocate, usage, sharing between processes) and pvmm.PoolAllocation.
#include <nanobind/stl/tuple.h>

#include <unistd.h>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "views.hpp"

namespace pvmm_py {

using namespace nb::literals;

namespace {

struct py_pool_allocation : owner<pvmm::pool_allocation> {
  nb::object stream;  // the stream it was allocated on (kept alive with it)
};

/// Allocations made and not yet freed through one MemoryPool object (PoolAllocation objects and raw pointers).
struct pool_counts {
  std::atomic<std::int64_t> live{0};
  std::atomic<std::uint64_t> made{0};
};

struct py_pool {
  holder<pvmm::memory_pool> h;
  int device = 0;
  std::shared_ptr<pool_counts> counts = std::make_shared<pool_counts>();
};

py_pool_allocation adopt(pvmm::pool_allocation&& a, int device, nb::handle stream,
                         const std::shared_ptr<pool_counts>& counts) {
  py_pool_allocation out;
  out.device = device;
  ++counts->live;
  ++counts->made;
  out.h.reset(std::shared_ptr<pvmm::pool_allocation>(new pvmm::pool_allocation(std::move(a)),
                                                     [counts](pvmm::pool_allocation* p) {
                                                       delete p;
                                                       --counts->live;
                                                     }));
  out.stream = nb::borrow(stream);
  return out;
}

}  // namespace

void bind_pool(nb::module_& m) {
  auto pool_allocation = nb::class_<py_pool_allocation>(m, "PoolAllocation", "One allocation from a MemoryPool.",
                                                        nb::type_slots(buffer_slots<py_pool_allocation>()));
  pool_allocation.def(
      "free",
      [](py_pool_allocation& a, nb::handle stream) {
        {
          auto alloc = a.h.begin_reshape("free");
          if (!stream.is_none()) {
            unwrap(alloc->free_async(stream_of(stream, a.device, "stream")));
          } else {
            unwrap(alloc->release());
          }
        }
        release_without_gil(a.h.take());
      },
      "stream"_a = nb::none(),
      "Frees in `stream`'s order (default: the stream it was allocated on). BusyError (a BufferError) while a view "
      "of the allocation is alive.");
  bind_memory(
      pool_allocation, "PoolAllocation", [](const pvmm::pool_allocation& b) { return b.data(); },
      [](const pvmm::pool_allocation& b) { return b.size(); });

  closable(nb::class_<py_pool>(m, "MemoryPool", "A stream-ordered memory pool."))
      .def_static(
          "create",
          [](int device, bool exportable, std::size_t max_size) {
            pvmm::pool_properties p;
            p.location = pvmm::location::device(device);
            p.max_size = max_size;
            if (exportable) p.exportable = pvmm::handle_types::posix_fd;
            py_pool pool;
            pool.device = device;
            pool.h.reset(std::make_shared<pvmm::memory_pool>(unwrap(pvmm::memory_pool::create(p))));
            return pool;
          },
          "device"_a = 0, "exportable"_a = false, "max_size"_a = 0)
      .def_static(
          "default",
          [](int device) {
            py_pool pool;
            pool.device = device;
            pool.h.reset(std::make_shared<pvmm::memory_pool>(unwrap(pvmm::memory_pool::default_pool(device))));
            return pool;
          },
          "device"_a = 0, "The device's default pool (not owned; its release threshold is the driver's, 0).")
      .def_prop_rw(
          "release_threshold",
          [](const py_pool& p) { return unwrap(p.h.use("release_threshold")->attributes()).release_threshold; },
          [](const py_pool& p, std::uint64_t bytes) {
            unwrap(p.h.use("release_threshold")->set_release_threshold(bytes));
          },
          "Reserved bytes above this go back at a synchronize (2**64-1 keeps everything; 0 gives all back).")
      .def(
          "allocate",
          [](const py_pool& p, std::size_t size, nb::handle stream) {
            auto pool = p.h.use("allocate");
            const auto on = stream_of(stream, p.device, "stream");
            return adopt(unwrap(pool->allocate(size, on)), p.device, stream, p.counts);
          },
          "size"_a, "stream"_a,
          "An allocation ordered on `stream` (a pvmm.Stream, or a foreign stream: an int handle, __cuda_stream__, "
          "a torch.cuda.Stream, a CuPy stream).")
      .def(
          "allocate_async",
          [](const py_pool& p, std::size_t size, nb::handle stream) {
            auto pool = p.h.use("allocate_async");
            void* pointer = unwrap(pool->allocate_async(size, stream_of(stream, p.device, "stream")));
            ++p.counts->live;
            ++p.counts->made;
            return reinterpret_cast<std::uintptr_t>(pointer);
          },
          "size"_a, "stream"_a, "A raw pointer (int) to give back with free_async.")
      .def(
          "free_async",
          [](const py_pool& p, std::uintptr_t pointer, nb::handle stream) {
            auto pool = p.h.use("free_async");
            unwrap(pool->free_async(reinterpret_cast<void*>(pointer), stream_of(stream, p.device, "stream")));
            --p.counts->live;
          },
          "pointer"_a, "stream"_a)
      .def(
          "usage",
          [](const py_pool& p) {
            auto u = unwrap(p.h.use("usage")->usage());
            return dict_of("reserved_current", u.reserved_current, "reserved_high", u.reserved_high, "used_current",
                           u.used_current, "used_high", u.used_high, "allocations", p.counts->live.load(),
                           "allocations_made", p.counts->made.load());
          },
          "Bytes reserved and used now and at their high marks (the pool's, every user's), and the allocations "
          "made through this MemoryPool object: live now (`allocations`) and ever (`allocations_made`).")
      .def(
          "reset_peak", [](const py_pool& p) { unwrap(p.h.use("reset_peak")->reset_high_marks()); },
          "Sets the high marks (reserved_high, used_high) to the current values.")
      .def(
          "trim",
          [](const py_pool& p, std::size_t keep) {
            call_unlocked(p.h, "trim", [&](auto& o) { return o.trim_to(keep); });
          },
          "keep"_a = 0, "Gives unused memory back now, keeping at least `keep` bytes reserved.")
      .def(
          "export_fd",
          [](const py_pool& p) {
            auto e = unwrap(p.h.use("export_fd")->export_posix_fd());
            return nb::make_tuple(e.fd.detach(), nb::bytes(reinterpret_cast<const char*>(e.id.bytes.data()), 16));
          },
          "(fd, pool id bytes): the caller owns the fd.")
      .def_static(
          "import_fd",
          [](int fd, nb::bytes id, int device) {
            pvmm::pool_export e;
            if (id.size() != e.id.bytes.size())
              raise(pvmm::errc::invalid_argument, "pvmm.MemoryPool.import_fd",
                    "a pool id is 16 bytes (MemoryPool.export_fd's second value)",
                    "pool_id of " + std::to_string(id.size()) + " bytes");
            e.fd = pvmm::owned_fd(::dup(fd));
            std::memcpy(e.id.bytes.data(), id.c_str(), e.id.bytes.size());
            py_pool pool;
            pool.device = device;
            pool.h.reset(std::make_shared<pvmm::memory_pool>(unwrap(pvmm::memory_pool::import_posix_fd(e, device))));
            return pool;
          },
          "fd"_a, "pool_id"_a, "device"_a = 0, "Imports an exported pool (the fd stays the caller's).")
      .def(
          "export_pointer",
          [](const py_pool& p, std::uintptr_t pointer) {
            auto e = unwrap(p.h.use("export_pointer")->export_pointer(reinterpret_cast<void*>(pointer)));
            return nb::bytes(reinterpret_cast<const char*>(&e), sizeof e);
          },
          "pointer"_a)
      .def(
          "import_pointer",
          [](const py_pool& p, nb::bytes record, nb::handle stream) {
            auto pool = p.h.use("import_pointer");
            const auto on = stream_of(stream, p.device, "stream");
            pvmm::pool_pointer_export e;
            if (record.size() != sizeof e)
              raise(pvmm::errc::protocol_error, "pvmm.MemoryPool.import_pointer",
                    "a pointer record is " + std::to_string(sizeof e) + " bytes");
            std::memcpy(&e, record.c_str(), sizeof e);
            return adopt(unwrap(pool->import_pointer(e, on)), p.device, stream, p.counts);
          },
          "record"_a, "stream"_a)
      .def("__repr__",
           [](const py_pool& p) {
             return std::string("<pvmm.MemoryPool device=") + std::to_string(p.device) +
                    (p.h.closed() ? " closed" : "") + ">";
           })
      .def(
          "__reduce__", [](nb::handle self) { return nb::module_::import_("pvmm.sharing").attr("_reduce_pool")(self); },
          "Pickles (multiprocessing) as its exported fd (created with exportable=True): the other process imports "
          "the same pool.")
      .def(
          "install_c_allocator", [](const py_pool& p) { install_c_pool(p.h.use("install_c_allocator")); },
          "Makes the C entry points (pvmm_torch_alloc/free) allocate from this pool.");
}

}  // namespace pvmm_py
