// Streams and events: pvmm.Stream (created, owned; or borrowed from a foreign handle) and pvmm.Event.
#include <nanobind/stl/string.h>

#include <cstdint>
#include <memory>
#include <string>

#include <pvmm/device.hpp>

#include "common.hpp"
#include "holder.hpp"

namespace pvmm_py {

using namespace nb::literals;

namespace {

/// What a Stream refers to: an owned stream (null for a borrowed one) and the reference calls use.
struct stream_state {
  std::shared_ptr<pvmm::stream> owned;
  pvmm::stream_ref ref;
};

struct py_stream {
  holder<stream_state> h;
  nb::object keep;  // a borrowed stream's Python object, kept alive while this refers to it (GIL held)
  stream_use use(const char* op) const {
    auto s = h.use(op);
    return stream_use{s->ref, s};
  }
  void close() {
    keep = nb::object();
    release_without_gil(h.take());  // an owned stream's destruction waits for its work
  }
};

struct py_event {
  holder<pvmm::event> h;
};

/// Handle 0, which torch's and CuPy's default stream report, is CUDA's legacy default stream: pvmm names it
/// CU_STREAM_LEGACY (1) on the cuda backend, where 0 would read as "no stream"; elsewhere it stays 0 and is refused.
std::uint64_t foreign_handle(std::uint64_t h) {
  static const bool cuda = pvmm::query_backend().name == "cuda";
  return h == 0 && cuda ? 1 : h;
}

/// A foreign stream's handle: an int, __cuda_stream__ (cuda.core's protocol), or torch's cuda_stream / CuPy's ptr;
/// TypeError naming `parameter` otherwise.
std::uint64_t stream_handle_of(nb::handle obj, const char* parameter) {
  if (nb::isinstance<nb::int_>(obj) && !nb::isinstance<nb::bool_>(obj))
    return foreign_handle(nb::cast<std::uint64_t>(obj));
  if (nb::hasattr(obj, "__cuda_stream__")) {
    nb::object t = obj.attr("__cuda_stream__")();
    return foreign_handle(nb::cast<std::uint64_t>(t[1]));
  }
  for (const char* attr : {"cuda_stream", "ptr", "handle"})
    if (nb::hasattr(obj, attr)) return foreign_handle(nb::cast<std::uint64_t>(obj.attr(attr)));
  const std::string type = nb::cast<std::string>(nb::type_name(obj.type()));
  throw nb::type_error((std::string(parameter) +
                        " must be a pvmm.Stream, an int handle, an object with "
                        "__cuda_stream__ (cuda.core), a torch.cuda.Stream or a CuPy stream, not " +
                        type)
                           .c_str());
}

}  // namespace

stream_use stream_of(nb::handle obj, int device, const char* parameter) {
  if (nb::isinstance<py_stream>(obj)) return nb::cast<const py_stream&>(obj).use(parameter);
  // a foreign stream of that device
  return stream_use{pvmm::stream_ref(pvmm::stream_handle{stream_handle_of(obj, parameter)}, device), nullptr};
}

void bind_stream(nb::module_& m) {
  auto stream_class = nb::class_<py_stream>(m, "Stream", "A stream: created (owned) or borrowed from a native handle.");
  stream_class
      .def_static(
          "create",
          [](int device) {
            auto st = std::make_shared<stream_state>();
            st->owned = std::make_shared<pvmm::stream>(unwrap(pvmm::stream::create(device)));
            st->ref = *st->owned;
            py_stream s;
            s.h.reset(std::move(st));
            return s;
          },
          "device"_a = 0)
      .def_static(
          "borrow",
          [](nb::object obj, int device) {
            auto st = std::make_shared<stream_state>();
            st->ref = pvmm::stream_ref(pvmm::stream_handle{stream_handle_of(obj, "stream")}, device);
            py_stream s;
            s.h.reset(std::move(st));
            s.keep = obj;
            return s;
          },
          "stream"_a, "device"_a = 0,
          "Borrows a foreign stream: an int handle, an object with __cuda_stream__ (cuda.core), a torch.cuda.Stream "
          "(.cuda_stream) or a CuPy stream (.ptr). The object is kept alive while this refers to it. Handle 0 (torch's "
          "and CuPy's default stream) is CUDA's legacy default stream on the cuda backend (handle 1, "
          "CU_STREAM_LEGACY).")
      .def_prop_ro("handle", [](const py_stream& s) { return s.use("handle").ref.native_handle().value; })
      .def_prop_ro("device", [](const py_stream& s) { return s.use("device").ref.device(); })
      .def_prop_ro(
          "closed", [](const py_stream& s) { return s.h.closed(); }, "Whether close() was called.")
      .def("__cuda_stream__",
           [](const py_stream& s) { return nb::make_tuple(0, s.use("__cuda_stream__").ref.native_handle().value); })
      .def("synchronize",
           [](const py_stream& s) {
             const auto on = s.use("synchronize");
             nb::gil_scoped_release release;
             unwrap(on.ref.synchronize());
           })
      .def(
          "copy",
          [](const py_stream& s, std::uintptr_t dst, std::uintptr_t src, std::size_t size) {
            const auto on = s.use("copy");
            nb::gil_scoped_release release;  // checks both ranges; stages pageable memory on some backends
            unwrap(on.ref.copy_async(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), size));
          },
          "destination"_a, "source"_a, "size"_a,
          "Copies in stream order (addresses as ints). Both ranges are checked before anything is enqueued: "
          "OutOfRangeError past the end of pvmm's memory there, NotMappedError in an unmapped part (a sleeping "
          "allocation), on the host backend also NotMappedError/NotPermittedError for memory the process cannot "
          "read or write.")
      .def("close", &py_stream::close, "Waits for an owned stream's work and destroys it; a borrowed one is let go.")
      .def(
          "__enter__", [](py_stream& self) -> py_stream& { return self; }, nb::rv_policy::reference)
      .def("__exit__", [](py_stream& s, nb::args) { s.close(); })
      .def("__repr__", [](const py_stream& s) {
        auto st = s.h.try_use();
        if (!st) return std::string("<pvmm.Stream closed>");
        return std::string("<pvmm.Stream ") + (st->owned ? "owned" : "borrowed") +
               " handle=" + std::to_string(st->ref.native_handle().value) + ">";
      });

  closable(nb::class_<py_event>(m, "Event", "A point in a stream's work that others can wait for."))
      .def_static(
          "create",
          [](int device) {
            py_event e;
            e.h.reset(std::make_shared<pvmm::event>(unwrap(pvmm::event::create(device))));
            return e;
          },
          "device"_a = 0)
      .def(
          "record",
          [](const py_event& e, nb::handle stream) {
            auto ev = e.h.use("record");
            unwrap(ev->record(stream_of(stream, ev->device(), "stream")));
          },
          "stream"_a)
      .def("synchronize",
           [](const py_event& e) { call_unlocked(e.h, "synchronize", [&](auto& o) { return o.synchronize(); }); })
      .def("query", [](const py_event& e) { return unwrap(e.h.use("query")->query()); })
      .def("__repr__",
           [](const py_event& e) { return std::string(e.h.closed() ? "<pvmm.Event closed>" : "<pvmm.Event>"); });
  stream_class.def(
      "wait",
      [](const py_stream& s, const py_event& e) {
        const auto on = s.use("wait");
        auto ev = e.h.use("wait");
        unwrap(on.ref.wait(*ev));
      },
      "event"_a, "Work enqueued after this waits for the work the event recorded.");
}

}  // namespace pvmm_py
