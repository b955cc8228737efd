// Views of memory owners: DLPack arrays (view(), __dlpack__), __cuda_array_interface__, and the owner classes'
// common methods (bind_memory). Every view holds an export pin on its owner (holder.hpp).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common.hpp"
#include "holder.hpp"

namespace pvmm_py {

/// DLPack's device label for memory of `label` on `device` under this build's backend (reference §4.2).
std::pair<int, int> dlpack_device(memory_label label, int device);

/// What a view covers, checked: [data + offset, + bytes) of `dtype` and `shape` inside [data, data + size).
struct view_spec {
  std::string dtype = "uint8";
  std::optional<std::vector<std::size_t>> shape;
  std::size_t offset = 0;
  bool read_only = false;
  /// Called with the view's (offset, bytes) once they are in bounds: raises where part of it cannot be read (a
  /// reservation's unmapped part). Empty: all of the memory can.
  std::function<void(std::size_t, std::size_t)> check{};
};

/// An array (nanobind's, DLPack 1.x and the buffer protocol; read-only when `spec.read_only`) over `spec` of
/// [data, data + size), holding `pin` (an export of the owner). out_of_range when it would end past `size`,
/// invalid_size when the shape's byte count overflows.
nb::object make_view(std::unique_ptr<export_pin> pin, void* data, std::size_t size, memory_label label, int device,
                     const view_spec& spec);

/// Whether memory of `label` is host-visible in this build (what the buffer protocol exports).
bool host_visible(memory_label label);

/// copy_from (into_owner) or copy_to between [data + offset, ...) of an owner (`size` bytes, on `device`) and
/// `other`: a pvmm owner (pinned by a view for the copy) or a C-contiguous bytes-like object (the buffer protocol),
/// all of `other`'s bytes. Ordered on `stream` (None: a new stream of `device`), and waited for: the copy has
/// completed when it returns (GIL released meanwhile). out_of_range past the owner's end; both ranges are checked
/// by pvmm before anything is enqueued.
void copy_with(void* data, std::size_t size, int device, bool read_only, std::size_t offset, nb::handle other,
               nb::handle stream, bool into_owner, const char* operation);

/// One buffer-protocol export: the pin and the shape and stride the Py_buffer points at.
struct buffer_export {
  std::unique_ptr<export_pin> pin;
  Py_ssize_t shape = 0;
  Py_ssize_t stride = 1;
};
/// Fills `view` over [data, data + size) (1-D unsigned bytes; read-only when `read_only`), keeping `pin`.
int fill_buffer(PyObject* self, Py_buffer* view, int flags, std::unique_ptr<export_pin> pin, void* data,
                std::size_t size, bool read_only);
void release_buffer(PyObject* self, Py_buffer* view) noexcept;

/// The data and size functions bind_memory was given for W (the buffer protocol's slot calls them).
template <class W>
struct memory_functions {
  using T = typename W::object_type;
  static inline void* (*data)(const T&) = nullptr;
  static inline std::size_t (*size)(const T&) = nullptr;
};

/// The buffer protocol's getbuffer for owner W: host-visible memory only (BufferError for device memory: use
/// view() or DLPack); the export pins the memory as a view does.
template <class W>
int get_buffer(PyObject* self, Py_buffer* view, int flags) noexcept {
  view->obj = nullptr;
  try {
    const W& w = *nb::inst_ptr<W>(self);
    if (!host_visible(w.label)) {
      PyErr_SetString(PyExc_BufferError, "device memory is not host-visible: use view() or DLPack instead");
      return -1;
    }
    auto pin = w.h.pin("__buffer__");
    const auto& o = *static_cast<const typename W::object_type*>(pin->keep.get());
    void* data = memory_functions<W>::data(o);
    const std::size_t size = memory_functions<W>::size(o);
    if (w.check_view) w.check_view(0, size);
    return fill_buffer(self, view, flags, std::move(pin), data, size, w.read_only());
  } catch (const pvmm::exception& e) {
    set_python_error(e.error());
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_BufferError, e.what());
  }
  return -1;
}

/// The type slots that give owner W the buffer protocol (memoryview(owner), bytes(owner), NumPy's asarray).
template <class W>
PyType_Slot* buffer_slots() {
  static PyType_Slot slots[] = {{Py_bf_getbuffer, reinterpret_cast<void*>(&get_buffer<W>)},
                                {Py_bf_releasebuffer, reinterpret_cast<void*>(&release_buffer)},
                                {0, nullptr}};
  return slots;
}

/// The owner of one piece of memory: the holder plus what DLPack needs to label it.
template <class T>
struct owner {
  using object_type = T;
  holder<T> h;
  memory_label label = memory_label::device;
  int device = 0;
  /// Whether views are exported read-only (a Reservation with a range set to "read" or "none").
  bool read_only() const noexcept { return restricted; }
  bool restricted = false;
  /// What every view's range is checked with (view_spec::check); empty where all of the memory is readable.
  std::function<void(std::size_t, std::size_t)> check_view;
};

/// The methods every memory owner has: address, size, closed, device, close, context manager, view, __dlpack__,
/// __dlpack_device__, __repr__ and (cuda, hip) __cuda_array_interface__.
template <class W, class Data, class Size>
void bind_memory(nb::class_<W>& cls, const char* name, Data data, Size size) {
  using namespace nb::literals;
  using T = typename W::object_type;
  memory_functions<W>::data = +data;  // captureless: the buffer protocol's slot has no closure to call
  memory_functions<W>::size = +size;
  // copy_from (into: into this memory) and copy_to, one body.
  const auto copy_method = [data, size](bool into, const char* method) {
    return [data, size, into, method](const W& w, nb::handle other, nb::handle stream, std::size_t offset) {
      auto pin = w.h.pin(method);
      const auto& o = *static_cast<const T*>(pin->keep.get());
      copy_with(data(o), size(o), w.device, w.read_only(), offset, other, stream, into, method);
    };
  };
  closable(cls,
           "Drops this owner's hold: the memory goes when no view and no call in another thread remains. Closing "
           "twice is fine.")
      .def_prop_ro(
          "address", [data](const W& w) { return reinterpret_cast<std::uintptr_t>(data(*w.h.use("address"))); },
          "The address as an int.")
      .def_prop_ro("size", [size](const W& w) { return size(*w.h.use("size")); })
      .def_prop_ro("device", [](const W& w) { return w.device; })
      .def(
          "view",
          [data, size](const W& w, const std::string& dtype, std::optional<std::vector<std::size_t>> shape,
                       std::size_t offset) {
            auto pin = w.h.pin("view");
            const auto& o = *static_cast<const T*>(pin->keep.get());
            return make_view(std::move(pin), data(o), size(o), w.label, w.device,
                             view_spec{dtype, std::move(shape), offset, w.read_only(), w.check_view});
          },
          "dtype"_a = "uint8", "shape"_a = nb::none(), "offset"_a = 0,
          "An array (DLPack 1.x, array API, buffer protocol) over the memory; it keeps the memory alive and, while "
          "it lives, pins it: what would move, shrink or unmap the memory raises BusyError (a BufferError).")
      .def(
          "__dlpack__",
          [data, size](nb::handle self, nb::kwargs kwargs) {
            const W& w = nb::cast<const W&>(self);
            auto pin = w.h.pin("__dlpack__");
            const auto& o = *static_cast<const T*>(pin->keep.get());
            nb::object arr = make_view(std::move(pin), data(o), size(o), w.label, w.device,
                                       view_spec{"uint8", std::nullopt, 0, w.read_only(), w.check_view});
            return arr.attr("__dlpack__")(**kwargs);
          },
          "The bytes as a 1-D uint8 DLPack tensor (versioned when the consumer asks for max_version >= 1; "
          "read-only where the memory is). It pins the memory as view() does.")
      .def("copy_from", copy_method(true, "copy_from"), "source"_a, "stream"_a = nb::none(), "offset"_a = 0,
           "Copies all of `source` (a pvmm owner, or a C-contiguous bytes-like object: bytes, a NumPy array) to "
           "offset `offset` here, ordered on `stream` (None: a new stream of this device) and waited for.")
      .def("copy_to", copy_method(false, "copy_to"), "destination"_a, "stream"_a = nb::none(), "offset"_a = 0,
           "Fills all of `destination` (a pvmm owner, or a writable C-contiguous bytes-like object) from offset "
           "`offset` here, ordered on `stream` (None: a new stream of this device) and waited for.")
      .def("__dlpack_device__",
           [](const W& w) {
             auto d = dlpack_device(w.label, w.device);
             return nb::make_tuple(d.first, d.second);
           })
      .def("__repr__", [name, data, size](const W& w) {
        auto o = w.h.try_use();
        if (!o) return std::string("<pvmm.") + name + " closed>";
        char buf[160];
        std::snprintf(buf, sizeof buf, "<pvmm.%s address=%p size=%zu device=%d>", name,
                      static_cast<const void*>(data(*o)), size(*o), w.device);
        return std::string(buf);
      });
  if (!backend_is("host")) {
    cls.def_prop_ro("__cuda_array_interface__", [data, size](const W& w) {
      auto o = w.h.use("__cuda_array_interface__");
      // "stream" is None: pvmm's calls that fill memory synchronize or name their stream
      return dict_of("shape", nb::make_tuple(size(*o)), "typestr", "|u1", "data",
                     nb::make_tuple(reinterpret_cast<std::uintptr_t>(data(*o)), w.read_only()), "version", 3, "strides",
                     nb::none(), "stream", nb::none());
    });
  }
}

}  // namespace pvmm_py
