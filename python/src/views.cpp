// DLPack views of memory owners: dtypes, device labels, and the one function that makes an array (checked bounds,
// the export pin, the read-only flag).
#include "views.hpp"

#include <nanobind/ndarray.h>

#include <cstdint>
#include <map>

namespace pvmm_py {

namespace {

nb::dlpack::dtype parse_dtype(const std::string& name) {
  static const std::map<std::string, nb::dlpack::dtype> known = {
      {"uint8", nb::dtype<std::uint8_t>()},
      {"int8", nb::dtype<std::int8_t>()},
      {"uint16", nb::dtype<std::uint16_t>()},
      {"int16", nb::dtype<std::int16_t>()},
      {"uint32", nb::dtype<std::uint32_t>()},
      {"int32", nb::dtype<std::int32_t>()},
      {"uint64", nb::dtype<std::uint64_t>()},
      {"int64", nb::dtype<std::int64_t>()},
      {"float32", nb::dtype<float>()},
      {"float64", nb::dtype<double>()},
      {"float16", {static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float), 16, 1}},
      {"bfloat16", {static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bfloat), 16, 1}},
      {"bool", {static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bool), 8, 1}},
  };
  auto it = known.find(name);
  if (it == known.end())
    raise(pvmm::errc::invalid_argument, "pvmm.view", "unknown dtype", "dtype=" + name,
          "one of uint8..uint64, int8..int64, float16, bfloat16, float32, float64, bool");
  return it->second;
}

}  // namespace

void throw_exported(const char* operation, std::size_t exports) {
  raise(pvmm::errc::busy, operation,
        std::to_string(exports) + " view(s) of this memory are alive (view(), __dlpack__, a buffer export)",
        "exports=" + std::to_string(exports),
        "views pin the memory: delete them (del array) before resizing, unmapping, changing access or freeing");
}

void throw_reshaping(const char* operation) {
  raise(pvmm::errc::busy, operation, "another thread is resizing, unmapping or freeing this memory", {},
        "take the view after that call returns");
}

bool host_visible(memory_label label) { return backend_is("host") || label != memory_label::device; }

int fill_buffer(PyObject* self, Py_buffer* view, int flags, std::unique_ptr<export_pin> pin, void* data,
                std::size_t size, bool read_only) {
  if ((flags & PyBUF_WRITABLE) == PyBUF_WRITABLE && read_only) {
    PyErr_SetString(PyExc_BufferError, "this memory is read-only (set_access \"read\"): ask for a read-only buffer");
    return -1;
  }
  auto* keep = new buffer_export{std::move(pin), static_cast<Py_ssize_t>(size), 1};
  view->obj = self;
  Py_INCREF(self);
  view->buf = data;
  view->len = static_cast<Py_ssize_t>(size);
  view->readonly = read_only ? 1 : 0;
  view->itemsize = 1;
  view->format = (flags & PyBUF_FORMAT) == PyBUF_FORMAT ? const_cast<char*>("B") : nullptr;
  view->ndim = 1;
  view->shape = (flags & PyBUF_ND) == PyBUF_ND ? &keep->shape : nullptr;
  view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? &keep->stride : nullptr;
  view->suboffsets = nullptr;
  view->internal = keep;
  return 0;
}

void release_buffer(PyObject*, Py_buffer* view) noexcept { delete static_cast<buffer_export*>(view->internal); }

namespace {

/// A Py_buffer released with its owner.
struct held_buffer {
  Py_buffer view{};
  bool held = false;
  held_buffer() = default;
  held_buffer(const held_buffer&) = delete;
  held_buffer& operator=(const held_buffer&) = delete;
  ~held_buffer() {
    if (held) PyBuffer_Release(&view);
  }
};

}  // namespace

void copy_with(void* data, std::size_t size, int device, bool read_only, std::size_t offset, nb::handle other,
               nb::handle stream, bool into_owner, const char* operation) {
  nb::object other_pin;  // a view of a pvmm owner: keeps it alive and unmoved for the copy
  held_buffer buffer;
  void* peer = nullptr;
  std::size_t bytes = 0;
  if (nb::hasattr(other, "__dlpack_device__") && nb::hasattr(other, "address") && nb::hasattr(other, "view")) {
    other_pin = other.attr("view")();
    peer = reinterpret_cast<void*>(nb::cast<std::uintptr_t>(other.attr("address")));
    bytes = nb::cast<std::size_t>(other.attr("size"));
  } else if (PyObject_CheckBuffer(other.ptr())) {
    if (PyObject_GetBuffer(other.ptr(), &buffer.view, PyBUF_C_CONTIGUOUS | (into_owner ? 0 : PyBUF_WRITABLE)) != 0)
      throw nb::python_error();
    buffer.held = true;
    peer = buffer.view.buf;
    bytes = static_cast<std::size_t>(buffer.view.len);
  } else {
    throw nb::type_error((std::string(into_owner ? "source" : "destination") +
                          " must be a pvmm memory owner or a C-contiguous bytes-like object (bytes, bytearray, a "
                          "NumPy array), not " +
                          nb::cast<std::string>(nb::type_name(other.type())))
                             .c_str());
  }
  if (offset > size || bytes > size - offset)
    raise(pvmm::errc::out_of_range, operation,
          "the copy would run past this memory's " + std::to_string(size) + " bytes",
          "offset=" + std::to_string(offset) + ", bytes=" + std::to_string(bytes));
  if (into_owner && read_only)
    raise(pvmm::errc::not_permitted, operation, "this memory is read-only (set_access \"read\")");
  if (bytes == 0) return;
  void* mine = static_cast<unsigned char*>(data) + offset;
  void* destination = into_owner ? mine : peer;
  const void* source = into_owner ? peer : mine;
  if (stream.is_none()) {
    nb::gil_scoped_release release;
    pvmm::stream own = unwrap(pvmm::stream::create(device));
    unwrap(own.copy_async(destination, source, bytes));
    unwrap(own.synchronize());
    return;
  }
  const stream_use on = stream_of(stream, device, "stream");
  nb::gil_scoped_release release;
  unwrap(on.ref.copy_async(destination, source, bytes));
  unwrap(on.ref.synchronize());
}

std::pair<int, int> dlpack_device(memory_label label, int device) {
  if (backend_is("host")) return {nb::device::cpu::value, 0};
  const bool rocm = PVMM_PY_ROCM != 0;  // hip on AMD; hip on HIP's NVIDIA platform labels as cuda
  switch (label) {
    case memory_label::pinned:
      return {rocm ? nb::device::rocm_host::value : nb::device::cuda_host::value, 0};
    case memory_label::managed:
      return {nb::device::cuda_managed::value, device};
    case memory_label::device:
    default:
      return {rocm ? nb::device::rocm::value : nb::device::cuda::value, device};
  }
}

nb::object make_view(std::unique_ptr<export_pin> pin, void* data, std::size_t size, memory_label label, int device,
                     const view_spec& spec) {
  const nb::dlpack::dtype dtype = parse_dtype(spec.dtype);
  const std::size_t item = dtype.bits / 8;
  const std::size_t offset = spec.offset;
  std::vector<std::size_t> dims;
  if (spec.shape) {
    dims = *spec.shape;
  } else {
    dims.push_back(offset <= size ? (size - offset) / item : 0);
  }
  std::size_t bytes = item;
  for (std::size_t d : dims)
    if (d > static_cast<std::size_t>(INT64_MAX) || __builtin_mul_overflow(bytes, d, &bytes))
      raise(pvmm::errc::invalid_size, "pvmm.view", "the shape's byte count overflows 64 bits",
            "dtype=" + spec.dtype + ", dimension=" + std::to_string(d), "a view lies inside its memory's bytes");
  if (offset > size || bytes > size - offset)
    raise(pvmm::errc::out_of_range, "pvmm.view",
          "the view would end past the memory's " + std::to_string(size) + " bytes",
          "offset=" + std::to_string(offset) + ", bytes=" + std::to_string(bytes));
  if (spec.check) spec.check(offset, bytes);
  auto* keep = pin.release();
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<export_pin*>(p); });
  const auto [type, id] = dlpack_device(label, device);
  void* first = static_cast<unsigned char*>(data) + offset;
  if (spec.read_only)
    return nb::cast(
        nb::ndarray<nb::array_api, nb::ro>(first, dims.size(), dims.data(), owner, nullptr, dtype, type, id));
  return nb::cast(nb::ndarray<nb::array_api>(first, dims.size(), dims.data(), owner, nullptr, dtype, type, id));
}

}  // namespace pvmm_py
