// Growable buffers and their sharing: pvmm.GrowableBuffer (resize, export) and pvmm.ImportedBuffer.
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "views.hpp"

namespace pvmm_py {

using namespace nb::literals;

namespace {

struct py_growable : owner<pvmm::growable_buffer> {};
struct py_imported : owner<pvmm::imported_buffer> {};

}  // namespace

void bind_growable(nb::module_& m) {
  auto growable = nb::class_<py_growable>(m, "GrowableBuffer", "A buffer that grows in place (VMM chunks).",
                                          nb::type_slots(buffer_slots<py_growable>()));
  growable
      .def_static(
          "create",
          [](int device, std::size_t chunk_size, std::size_t reserve_size, bool exportable) {
            pvmm::growable_options o;
            o.properties = device_props(device, exportable);
            o.access = {{pvmm::location::device(device), pvmm::access::read_write}};
            o.chunk_size = chunk_size;
            o.reserve_size = reserve_size;
            py_growable g;
            g.device = device;
            std::shared_ptr<pvmm::growable_buffer> b;
            {
              nb::gil_scoped_release release;
              b = std::make_shared<pvmm::growable_buffer>(unwrap(pvmm::growable_buffer::create(o)));
            }
            g.h.reset(std::move(b));
            return g;
          },
          "device"_a = 0, "chunk_size"_a = 0, "reserve_size"_a = 0, "exportable"_a = false)
      .def(
          "resize",
          [](py_growable& g, std::size_t size) {
            auto b = g.h.begin_reshape("resize");
            pvmm::resize_outcome out;
            {
              nb::gil_scoped_release release;
              out = unwrap(b->resize(size));
            }
            return dict_of("moved", out.moved, "address", reinterpret_cast<std::uintptr_t>(out.address), "chunks_added",
                           out.chunks_added, "chunks_removed", out.chunks_removed);
          },
          "size"_a,
          "Grows or shrinks to at least `size` bytes; says whether the buffer moved. BusyError (a BufferError) while "
          "a view of the buffer is alive (a resize may move or shrink it), as bytearray refuses to resize.")
      .def_prop_ro("capacity", [](const py_growable& g) { return g.h.use("capacity")->capacity(); })
      .def_prop_ro("chunk_size", [](const py_growable& g) { return g.h.use("chunk_size")->chunk_size(); })
      .def(
          "export",
          [](const py_growable& g) {
            auto b = g.h.use("export");
            auto e = unwrap(pvmm::export_buffer(*b, pvmm::handle_types::posix_fd));
            auto bytes = e.descriptor.serialize();
            std::vector<int> fds;
            for (auto& fd : e.fds) fds.push_back(fd.detach());
            return nb::make_tuple(nb::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size()), fds);
          },
          "(descriptor bytes, fds): the caller owns the fds (pvmm.ExportedBuffer wraps and pickles them).")
      .def(
          "__reduce__",
          [](nb::handle self) { return nb::module_::import_("pvmm.sharing").attr("_reduce_buffer")(self); },
          "Pickles (multiprocessing) as its exported chunks (created with exportable=True): the other process gets "
          "an ImportedBuffer of the same memory.");
  bind_memory(
      growable, "GrowableBuffer", [](const pvmm::growable_buffer& b) { return b.data(); },
      [](const pvmm::growable_buffer& b) { return b.size(); });

  auto imported = nb::class_<py_imported>(m, "ImportedBuffer", "Another process's exported buffer, mapped here.",
                                          nb::type_slots(buffer_slots<py_imported>()));
  imported.def_static(
      "open",
      [](nb::bytes descriptor, const std::vector<int>& fds, int device) {
        auto d = unwrap(pvmm::buffer_descriptor::parse(reinterpret_cast<const std::uint8_t*>(descriptor.c_str()),
                                                       descriptor.size(), fds.size()));
        const pvmm::access_descriptor access{pvmm::location::device(device), pvmm::access::read_write};
        py_imported i;
        i.device = device;
        std::shared_ptr<pvmm::imported_buffer> b;
        {
          nb::gil_scoped_release release;  // blocks: imports and maps every chunk
          b = std::make_shared<pvmm::imported_buffer>(unwrap(pvmm::import_buffer(d, fds.data(), fds.size(), {access})));
        }
        i.h.reset(std::move(b));
        return i;
      },
      "descriptor"_a, "fds"_a, "device"_a = 0, "Imports (the fds stay the caller's).");
  bind_memory(
      imported, "ImportedBuffer", [](const pvmm::imported_buffer& b) { return b.data(); },
      [](const pvmm::imported_buffer& b) { return b.size(); });
}

}  // namespace pvmm_py
