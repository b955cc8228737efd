// pvmm._pvmm: the nanobind module behind the `pvmm` Python package (python/pvmm/__init__.py re-exports it).
//
// Every memory owner is held in a shared pointer: close() drops the Python object's share, a DLPack view (or an
// array from view()) holds its own, so a view outlives its owner and the memory goes with the last of them.
// The GIL is released around exactly the calls pvmm.hpp lists as blocking (nb::call_guard below).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <unistd.h>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "arena.hpp"
#include "common.hpp"
#include "sleeping.hpp"

namespace nb = nanobind;
using namespace nb::literals;
using pvmm_py::memory_label;
using pvmm_py::unwrap;

namespace {

#ifndef PVMM_PY_BACKEND
#define PVMM_PY_BACKEND "host"
#endif
#ifndef PVMM_PY_ROCM
#define PVMM_PY_ROCM 0
#endif
constexpr bool backend_is(const char* name) { return std::string_view(PVMM_PY_BACKEND) == name; }

// ---- exceptions, generated from PVMM_ERRC_LIST -------------------------------------------------------------------

PyObject* base_error = nullptr;
std::map<int, PyObject*> error_classes;

std::string class_name(const char* errc_name) {
  std::string out;
  bool upper = true;
  for (const char* c = errc_name; *c; ++c) {
    if (*c == '_') {
      upper = true;
      continue;
    }
    out += upper ? static_cast<char>(*c - 'a' + 'A') : *c;
    upper = false;
  }
  return out.size() > 5 && out.compare(out.size() - 5, 5, "Error") == 0 ? out : out + "Error";  // no ErrorError
}

void register_errors(nb::module_& m) {
  // Named after the module as imported ("pvmm._pvmm"; "_pvmm" when stubgen imports it alone), so that stubgen
  // lists the classes in the stub.
  const std::string module = nb::cast<std::string>(m.attr("__name__"));
  base_error = PyErr_NewExceptionWithDoc((module + ".PvmmError").c_str(),
                                         "Base of every pvmm error. Fields: code (errc name), value (errc value), "
                                         "operation, arguments, detail, native_name, native_code, hint.",
                                         PyExc_RuntimeError, nullptr);
  m.attr("PvmmError") = nb::handle(base_error);
  nb::dict errc;
#define PVMM_PY_ERROR(name, value, meaning)                                                                 \
  {                                                                                                         \
    const std::string cls = class_name(#name);                                                              \
    PyObject* type = PyErr_NewExceptionWithDoc((module + "." + cls).c_str(), meaning, base_error, nullptr); \
    m.attr(cls.c_str()) = nb::handle(type);                                                                 \
    error_classes[value] = type;                                                                            \
    errc[#name] = nb::make_tuple(value, meaning, nb::handle(type));                                         \
  }
  PVMM_ERRC_LIST(PVMM_PY_ERROR)
#undef PVMM_PY_ERROR
  m.attr("ERRC") = errc;

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const pvmm::exception& ex) {
      const pvmm::error& e = ex.error();
      auto it = error_classes.find(static_cast<int>(e.code));
      PyObject* type = it == error_classes.end() ? base_error : it->second;
      nb::object instance = nb::steal(PyObject_CallFunction(type, "s", e.message().c_str()));
      if (!instance.is_valid()) return;  // the call set an exception of its own
      instance.attr("code") = pvmm::to_string(e.code);
      instance.attr("value") = static_cast<int>(e.code);
      instance.attr("operation") = e.operation;
      instance.attr("arguments") = e.arguments;
      instance.attr("detail") = e.detail;
      instance.attr("native_name") = e.native_name;
      instance.attr("native_code") = e.native_code;
      instance.attr("hint") = e.hint;
      PyErr_SetObject(type, instance.ptr());
    }
  });
}

// ---- DLPack: one array type for every owner --------------------------------------------------------------------

using array = nb::ndarray<nb::array_api>;

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
  if (it == known.end()) {
    pvmm::error e;
    e.code = pvmm::errc::invalid_argument;
    e.operation = "pvmm.view";
    e.arguments = "dtype=" + name;
    e.detail = "unknown dtype";
    e.hint = "one of uint8..uint64, int8..int64, float16, bfloat16, float32, float64, bool";
    throw pvmm::exception(e);
  }
  return it->second;
}

/// DLPack's device label for memory of `label` on `device` under this build's backend (reference §4.2).
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

/// An array over [data + offset, ...) of `dtype` and `shape` (default: the whole range, 1-D), whose owner holds
/// `keep` (the owner's shared state).
array make_view(std::shared_ptr<void> keep, void* data, std::size_t size, memory_label label, int device,
                const std::string& dtype_name, std::optional<std::vector<std::size_t>> shape, std::size_t offset) {
  const nb::dlpack::dtype dtype = parse_dtype(dtype_name);
  const std::size_t item = dtype.bits / 8;
  std::vector<std::size_t> dims;
  if (shape) {
    dims = *shape;
  } else {
    dims.push_back(offset <= size ? (size - offset) / item : 0);
  }
  std::size_t bytes = item;
  for (std::size_t d : dims) bytes *= d;
  if (offset > size || bytes > size - offset) {
    pvmm::error e;
    e.code = pvmm::errc::out_of_range;
    e.operation = "pvmm.view";
    e.arguments = "offset=" + std::to_string(offset) + ", bytes=" + std::to_string(bytes);
    e.detail = "the view would end past the memory's " + std::to_string(size) + " bytes";
    throw pvmm::exception(e);
  }
  auto* holder = new std::shared_ptr<void>(std::move(keep));
  nb::capsule owner(holder, [](void* p) noexcept { delete static_cast<std::shared_ptr<void>*>(p); });
  const auto [type, id] = dlpack_device(label, device);
  return array(static_cast<unsigned char*>(data) + offset, dims.size(), dims.data(), owner, nullptr, dtype, type, id);
}

}  // namespace

namespace pvmm_py {
nb::ndarray<nb::array_api> make_array(std::shared_ptr<void> keep, void* data, std::size_t size, int device,
                                      const std::string& dtype, std::optional<std::vector<std::size_t>> shape,
                                      std::size_t offset) {
  return make_view(std::move(keep), data, size, memory_label::device, device, dtype, std::move(shape), offset);
}
void bind_team(nb::module_& m);       // team.cpp
void bind_transport(nb::module_& m);  // transport.cpp
void bind_snapshot(nb::module_& m);   // bind_snapshot.cpp
}  // namespace pvmm_py

namespace {

// ---- owners ------------------------------------------------------------------------------------------------------

/// A Python owner of pvmm memory: the C++ owner in a shared pointer (null once closed).
template <class T>
struct owner {
  std::shared_ptr<T> ptr;
  memory_label label = memory_label::device;
  int device = 0;
  T& get(const char* op) const {
    if (!ptr) pvmm_py::throw_closed(op);
    return *ptr;
  }
  void close() { ptr.reset(); }  // the memory goes with the last view
};

template <class W, class Data, class Size>
void bind_memory(nb::class_<W>& cls, const char* name, Data data, Size size) {
  cls.def_prop_ro(
         "address", [data](const W& w) { return reinterpret_cast<std::uintptr_t>(data(w.get("address"))); },
         "The address as an int.")
      .def_prop_ro("size", [size](const W& w) { return size(w.get("size")); })
      .def_prop_ro("closed", [](const W& w) { return !w.ptr; })
      .def_prop_ro("device", [](const W& w) { return w.device; })
      .def(
          "close", [](W& w) { w.close(); },
          "Drops this owner's hold: the memory goes when no view remains. Closing twice is fine.")
      .def(
          "__enter__", [](W& self) -> W& { return self; }, nb::rv_policy::reference)
      .def("__exit__", [](W& w, nb::args) { w.close(); })
      .def(
          "view",
          [data, size](const W& w, const std::string& dtype, std::optional<std::vector<std::size_t>> shape,
                       std::size_t offset) {
            auto& o = w.get("view");
            return make_view(w.ptr, data(o), size(o), w.label, w.device, dtype, std::move(shape), offset);
          },
          "dtype"_a = "uint8", "shape"_a = nb::none(), "offset"_a = 0,
          "An array (DLPack 1.x, array API) over the memory; it keeps the memory alive.")
      .def(
          "__dlpack__",
          [data, size](nb::handle self, nb::kwargs kwargs) {
            const W& w = nb::cast<const W&>(self);
            auto& o = w.get("__dlpack__");
            nb::object arr = nb::cast(make_view(w.ptr, data(o), size(o), w.label, w.device, "uint8", {}, 0));
            return arr.attr("__dlpack__")(**kwargs);
          },
          "The bytes as a 1-D uint8 DLPack tensor (versioned when the consumer asks for max_version >= 1).")
      .def("__dlpack_device__",
           [](const W& w) {
             auto d = dlpack_device(w.label, w.device);
             return nb::make_tuple(d.first, d.second);
           })
      .def("__repr__", [name, data, size](const W& w) {
        if (!w.ptr) return std::string("<pvmm.") + name + " closed>";
        char buf[160];
        std::snprintf(buf, sizeof buf, "<pvmm.%s address=%p size=%zu device=%d>", name, data(*w.ptr), size(*w.ptr),
                      w.device);
        return std::string(buf);
      });
  if (!backend_is("host")) {
    cls.def_prop_ro("__cuda_array_interface__", [data, size](const W& w) {
      auto& o = w.get("__cuda_array_interface__");
      nb::dict d;
      d["shape"] = nb::make_tuple(size(o));
      d["typestr"] = "|u1";
      d["data"] = nb::make_tuple(reinterpret_cast<std::uintptr_t>(data(o)), false);
      d["version"] = 3;
      d["strides"] = nb::none();
      d["stream"] = nb::none();  // pvmm's calls that fill memory synchronize or name their stream
      return d;
    });
  }
}

struct py_stream {
  std::shared_ptr<pvmm::stream> owned;  // null for a borrowed stream
  pvmm::stream_ref ref;
  nb::object keep;  // a borrowed stream's Python object, kept alive while this refers to it
  const pvmm::stream_ref& get(const char* op) const {
    if (!ref.native_handle().value) pvmm_py::throw_closed(op);
    return ref;
  }
  void close() {
    nb::gil_scoped_release release;  // blocks: waits for the stream's work
    if (owned) owned.reset();
    ref = {};
  }
};

/// A foreign stream's handle: an int, __cuda_stream__ (cuda.core's protocol), or torch's cuda_stream / CuPy's ptr.
std::uint64_t stream_handle_of(nb::handle obj) {
  if (nb::isinstance<nb::int_>(obj)) return nb::cast<std::uint64_t>(obj);
  if (nb::hasattr(obj, "__cuda_stream__")) {
    nb::object t = obj.attr("__cuda_stream__")();
    return nb::cast<std::uint64_t>(t[1]);
  }
  for (const char* attr : {"cuda_stream", "ptr", "handle"})
    if (nb::hasattr(obj, attr)) return nb::cast<std::uint64_t>(obj.attr(attr));
  pvmm::error e;
  e.code = pvmm::errc::invalid_argument;
  e.operation = "pvmm.Stream.borrow";
  e.detail = "not a stream: expected an int handle, __cuda_stream__, .cuda_stream (torch) or .ptr (CuPy)";
  throw pvmm::exception(e);
}

pvmm::stream_ref stream_arg(const py_stream& s) { return s.get("stream"); }

}  // namespace

namespace pvmm_py {
pvmm::stream_ref stream_of(nb::handle obj, int device) {
  if (nb::isinstance<py_stream>(obj)) return nb::cast<const py_stream&>(obj).get("stream");
  return pvmm::stream_ref(pvmm::stream_handle{stream_handle_of(obj)}, device);  // a foreign stream of that device
}
}  // namespace pvmm_py

namespace {

struct py_event {
  std::shared_ptr<pvmm::event> ptr;
  pvmm::event& get(const char* op) const {
    if (!ptr) pvmm_py::throw_closed(op);
    return *ptr;
  }
};

struct py_pool {
  std::shared_ptr<pvmm::memory_pool> ptr;
  int device = 0;
  const pvmm::memory_pool& get(const char* op) const {
    if (!ptr) pvmm_py::throw_closed(op);
    return *ptr;
  }
};

struct py_pinned_pool {
  std::shared_ptr<pvmm::pinned_pool> ptr;
  pvmm::pinned_pool& get(const char* op) const {
    if (!ptr) pvmm_py::throw_closed(op);
    return *ptr;
  }
};

struct py_pool_allocation : owner<pvmm::pool_allocation> {
  nb::object stream;  // the stream it was allocated on: release() frees there
};

struct py_physical : owner<pvmm::physical_allocation> {};
struct py_reservation : owner<pvmm::address_reservation> {};
struct py_growable : owner<pvmm::growable_buffer> {};
struct py_pinned : owner<pvmm::pinned_allocation> {};
struct py_managed : owner<pvmm::managed_allocation> {};
struct py_imported : owner<pvmm::imported_buffer> {};

struct py_sleeping {
  std::shared_ptr<pvmm_py::sleeping_allocator> ptr;  // views hold a share: close() with views left keeps the memory
  pvmm_py::sleeping_allocator& get(const char* op) const {
    if (!ptr) pvmm_py::throw_closed(op);
    return *ptr;
  }
};
struct py_arena {
  std::shared_ptr<pvmm_py::growable_arena> ptr;  // views hold a share, as the sleeping allocator's
  pvmm_py::growable_arena& get(const char* op) const {
    if (!ptr) pvmm_py::throw_closed(op);
    return *ptr;
  }
};
// The allocator the C entry points below serve: one at a time, the last installed (from Python by pvmm.allocators).
// Global because PyTorch and CuPy load the entry points by name and pass them no context. PyTorch calls them from
// any thread while Python may install or close a source: each call copies what it needs under c_source_lock and
// allocates or frees outside it (the lock is never held across a driver call or user code).
struct c_source {
  std::shared_ptr<pvmm::memory_pool> pool;
  std::shared_ptr<pvmm_py::sleeping_allocator> sleeping;
  std::shared_ptr<pvmm_py::growable_arena> arena;
  std::string tag = "default";  // what the sleeping allocator tags new allocations with
};
// Sources that served the entry points and may still hold allocations made through them: PyTorch may free a segment
// after another source was installed (a MemPool outliving its turn) or after Python closed the source's owner. The
// free must reach the source that made it, alive: arenas and sleeping allocators stay here until they are neither
// installed nor holding allocations. A pool cannot tell its pointers from another's: frees that no arena or sleeping
// allocator owns go to the last pool installed.
struct c_retained {
  std::vector<std::shared_ptr<pvmm_py::growable_arena>> arenas;
  std::vector<std::shared_ptr<pvmm_py::sleeping_allocator>> sleepers;
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
  std::vector<std::shared_ptr<pvmm_py::growable_arena>> arenas;  // released after the lock
  std::vector<std::shared_ptr<pvmm_py::sleeping_allocator>> sleepers;
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
    if constexpr (std::is_same_v<T, pvmm_py::sleeping_allocator>) keep(c_kept.sleepers, c_installed.sleeping = source);
    if constexpr (std::is_same_v<T, pvmm_py::growable_arena>) keep(c_kept.arenas, c_installed.arena = source);
  }
  prune_c_sources();
}
/// Uninstalls `source` if it is the one installed (its owner is closing); it stays while it holds allocations.
template <class T>
void uninstall_c_source(const std::shared_ptr<T>& source) {
  {
    std::shared_ptr<T> old;  // released after the lock
    std::lock_guard<std::mutex> guard(c_source_lock);
    if constexpr (std::is_same_v<T, pvmm_py::sleeping_allocator>) {
      if (c_installed.sleeping == source) old = std::move(c_installed.sleeping);
    }
    if constexpr (std::is_same_v<T, pvmm_py::growable_arena>) {
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

nb::dict to_dict(const pvmm::pointer_attributes& a) {
  static const char* kinds[] = {"none", "device", "pool", "managed", "pinned", "registered"};
  nb::dict d;
  d["kind"] = kinds[static_cast<int>(a.kind)];
  d["base"] = reinterpret_cast<std::uintptr_t>(a.base);
  d["size"] = a.size;
  d["device"] = a.device;
  d["mapped"] = a.mapped;
  return d;
}

nb::dict capabilities_dict(const pvmm::capabilities& c) {
  nb::dict d;
  d["vmm"] = c.vmm.supported;
  d["posix_fd"] = c.sharing.posix_fd;
  d["fabric"] = c.sharing.fabric;
  d["multicast"] = c.multicast.supported;
  d["pools"] = c.pools.supported;
  d["pool_ipc"] = c.pools.ipc_posix_fd;
  d["managed"] = c.managed.supported;
  d["concurrent_managed_access"] = c.managed.concurrent_access;
  d["pinned"] = c.host_memory.pinned;
  d["registration"] = c.host_memory.registration;
  d["mapped_host_memory"] = c.host_memory.mapped;
  return d;
}

pvmm::allocation_properties device_props(int device, bool exportable) {
  pvmm::allocation_properties p;
  p.location = pvmm::location::device(device);
  if (exportable) p.exportable = pvmm::handle_types::posix_fd;
  return p;
}

}  // namespace

// C entry points for PyTorch's CUDAPluggableAllocator and CuPy's CFunctionAllocator (python/pvmm/allocators.py).
extern "C" {
__attribute__((visibility("default"))) void* pvmm_torch_alloc(std::size_t size, int device, void* stream) {
  const c_source source = installed_c_source();
  if (source.arena) {
    auto p = source.arena->allocate(size);
    return p ? *p : nullptr;
  }
  if (source.sleeping) {
    auto p = source.sleeping->allocate(size, source.tag);
    return p ? *p : nullptr;
  }
  if (!source.pool) return nullptr;
  auto p = source.pool->allocate_async(size, foreign_stream(stream, device));
  return p ? *p : nullptr;
}
__attribute__((visibility("default"))) void pvmm_torch_free(void* pointer, std::size_t, int device, void* stream) {
  const c_retained kept = retained_c_sources();
  if (auto arena = owner_of(kept.arenas, pointer)) {
    // The arena unmaps what no allocation reaches any more: the freeing stream's work must be done (PyTorch frees
    // segments rarely: on empty_cache, or to retry an allocation that failed).
    if (stream || !backend_is("host")) (void)foreign_stream(stream, device).synchronize();
    (void)arena->free(pointer);
  } else if (auto sleeping = owner_of(kept.sleepers, pointer)) {
    (void)sleeping->free(pointer);
  } else if (kept.last_pool) {
    (void)kept.last_pool->free_async(pointer, foreign_stream(stream, device));
  }
  prune_c_sources();
}
// CuPy's CFunctionAllocator: `param` is the stream handle the allocator was made for. Pools only.
__attribute__((visibility("default"))) void* pvmm_cupy_malloc(void* param, std::size_t size, int device) {
  const auto pool = installed_c_source().pool;
  if (!pool) return nullptr;
  auto p = pool->allocate_async(size, foreign_stream(param, device));
  return p ? *p : nullptr;
}
__attribute__((visibility("default"))) void pvmm_cupy_free(void* param, void* pointer, int device) {
  if (const auto pool = installed_c_source().pool) (void)pool->free_async(pointer, foreign_stream(param, device));
}
}

NB_MODULE(_pvmm, m) {
  m.doc() = "pvmm: portable GPU virtual memory management (the compiled part; import pvmm)";
  m.attr("BACKEND") = PVMM_PY_BACKEND;
  register_errors(m);
  pvmm_py::bind_team(m);
  pvmm_py::bind_transport(m);
  pvmm_py::bind_snapshot(m);

  // ---- devices ----
  m.def("backend", [] {
    auto b = pvmm::query_backend();
    nb::dict d;
    d["name"] = b.name;
    d["available"] = b.available;
    d["runtime_version"] = b.runtime_version;
    d["driver_version"] = b.driver_version;
    d["unavailable_reason"] = b.unavailable_reason;
    return d;
  });
  m.def("device_count", [] { return unwrap(pvmm::device_count()); });
  m.def(
      "device",
      [](int ordinal) {
        auto i = unwrap(pvmm::query_device(ordinal));
        nb::dict d;
        d["ordinal"] = i.ordinal;
        d["name"] = i.name;
        d["identifier"] = i.identifier;
        d["total_memory"] = i.total_memory;
        d["capabilities"] = capabilities_dict(i.capabilities);
        return d;
      },
      "ordinal"_a = 0);
  m.def(
      "granularity",
      [](int device) {
        auto g = unwrap(pvmm::query_granularity(device_props(device, false)));
        return nb::make_tuple(g.minimum, g.recommended);
      },
      "device"_a = 0, "(minimum, recommended) sizes for physical allocations on `device`.");
  m.def(
      "query_pointer",
      [](std::uintptr_t address) { return to_dict(unwrap(pvmm::query_pointer(reinterpret_cast<void*>(address)))); },
      "address"_a);

  // ---- streams ----
  auto stream_class = nb::class_<py_stream>(m, "Stream", "A stream: created (owned) or borrowed from a native handle.");
  stream_class
      .def_static(
          "create",
          [](int device) {
            py_stream s;
            s.owned = std::make_shared<pvmm::stream>(unwrap(pvmm::stream::create(device)));
            s.ref = *s.owned;
            return s;
          },
          "device"_a = 0)
      .def_static(
          "borrow",
          [](nb::object obj, int device) {
            py_stream s;
            s.ref = pvmm::stream_ref(pvmm::stream_handle{stream_handle_of(obj)}, device);
            s.keep = obj;
            return s;
          },
          "stream"_a, "device"_a = 0,
          "Borrows a foreign stream: an int handle, an object with __cuda_stream__ (cuda.core), a torch.cuda.Stream "
          "(.cuda_stream) or a CuPy stream (.ptr). The object is kept alive while this refers to it.")
      .def_prop_ro("handle", [](const py_stream& s) { return s.ref.native_handle().value; })
      .def_prop_ro("device", [](const py_stream& s) { return s.ref.device(); })
      .def("__cuda_stream__",
           [](const py_stream& s) { return nb::make_tuple(0, s.get("__cuda_stream__").native_handle().value); })
      .def(
          "synchronize", [](const py_stream& s) { unwrap(s.get("synchronize").synchronize()); },
          nb::call_guard<nb::gil_scoped_release>())
      .def(
          "copy",
          [](const py_stream& s, std::uintptr_t dst, std::uintptr_t src, std::size_t size) {
            unwrap(s.get("copy").copy_async(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), size));
          },
          "destination"_a, "source"_a, "size"_a, "Copies in stream order (addresses as ints).")
      .def("close", &py_stream::close, "Waits for an owned stream's work and destroys it; a borrowed one is let go.")
      .def(
          "__enter__", [](py_stream& self) -> py_stream& { return self; }, nb::rv_policy::reference)
      .def("__exit__", [](py_stream& s, nb::args) { s.close(); })
      .def("__repr__", [](const py_stream& s) {
        return std::string("<pvmm.Stream ") + (s.owned ? "owned" : "borrowed") +
               " handle=" + std::to_string(s.ref.native_handle().value) + ">";
      });

  nb::class_<py_event>(m, "Event", "A point in a stream's work that others can wait for.")
      .def_static(
          "create",
          [](int device) { return py_event{std::make_shared<pvmm::event>(unwrap(pvmm::event::create(device)))}; },
          "device"_a = 0)
      .def(
          "record", [](const py_event& e, const py_stream& s) { unwrap(e.get("record").record(stream_arg(s))); },
          "stream"_a)
      .def("synchronize",
           [](const py_event& e) {
             auto& ev = e.get("synchronize");
             nb::gil_scoped_release release;
             unwrap(ev.synchronize());
           })
      .def("query", [](const py_event& e) { return unwrap(e.get("query").query()); })
      .def("close", [](py_event& e) { e.ptr.reset(); })
      .def(
          "__enter__", [](py_event& self) -> py_event& { return self; }, nb::rv_policy::reference)
      .def("__exit__", [](py_event& e, nb::args) { e.ptr.reset(); })
      .def("__repr__", [](const py_event& e) { return std::string(e.ptr ? "<pvmm.Event>" : "<pvmm.Event closed>"); });
  stream_class.def(
      "wait", [](const py_stream& s, const py_event& e) { unwrap(s.get("wait").wait(e.get("wait"))); }, "event"_a,
      "Work enqueued after this waits for the work the event recorded.");

  // ---- physical allocations and reservations ----
  nb::class_<py_physical>(m, "PhysicalAllocation", "Physical memory (no address until mapped in a Reservation).")
      .def_static(
          "create",
          [](std::size_t size, int device, bool exportable) {
            py_physical p;
            p.device = device;
            p.ptr = std::make_shared<pvmm::physical_allocation>(
                unwrap(pvmm::physical_allocation::create(size, device_props(device, exportable))));
            return p;
          },
          "size"_a, "device"_a = 0, "exportable"_a = false)
      .def_prop_ro("size", [](const py_physical& p) { return p.get("size").size(); })
      .def(
          "export_fd", [](const py_physical& p) { return unwrap(p.get("export_fd").export_posix_fd()).detach(); },
          "A POSIX fd for another process (created with exportable=True); the caller owns it.")
      .def_static(
          "import_fd",
          [](int fd, std::size_t size, int device) {
            py_physical p;
            p.device = device;
            p.ptr = std::make_shared<pvmm::physical_allocation>(
                unwrap(pvmm::physical_allocation::import_posix_fd(fd, size)));
            return p;
          },
          "fd"_a, "size"_a, "device"_a = 0, "Imports an exported allocation (the fd stays the caller's).")
      .def("close", [](py_physical& p) { p.close(); })
      .def(
          "__enter__", [](py_physical& self) -> py_physical& { return self; }, nb::rv_policy::reference)
      .def("__exit__", [](py_physical& p, nb::args) { p.close(); })
      .def("__repr__", [](const py_physical& p) {
        return p.ptr ? "<pvmm.PhysicalAllocation size=" + std::to_string(p.ptr->size()) + ">"
                     : std::string("<pvmm.PhysicalAllocation closed>");
      });

  auto reservation = nb::class_<py_reservation>(m, "Reservation", "A range of virtual addresses to map memory in.");
  reservation
      .def_static(
          "reserve",
          [](std::size_t size, int device) {
            py_reservation r;
            r.device = device;
            r.ptr = std::make_shared<pvmm::address_reservation>(unwrap(pvmm::address_reservation::reserve(size)));
            return r;
          },
          "size"_a, "device"_a = 0)
      .def(
          "map",
          [](py_reservation& r, std::size_t offset, const py_physical& memory, bool grant) {
            auto& range = r.get("map");
            const pvmm::access_descriptor access{pvmm::location::device(r.device), pvmm::access::read_write};
            void* p = grant ? unwrap(range.map_and_grant(offset, memory.get("map"), {access}))
                            : unwrap(range.map(offset, memory.get("map")));
            return reinterpret_cast<std::uintptr_t>(p);
          },
          "offset"_a, "memory"_a, "grant"_a = true, "Maps all of `memory` at `offset` (granting read-write access).")
      .def(
          "unmap",
          [](py_reservation& r, std::size_t offset, std::size_t size) { unwrap(r.get("unmap").unmap(offset, size)); },
          "offset"_a, "size"_a)
      .def(
          "set_access",
          [](py_reservation& r, std::size_t offset, std::size_t size, const std::string& mode) {
            const pvmm::access a = mode == "none"   ? pvmm::access::none
                                   : mode == "read" ? pvmm::access::read
                                                    : pvmm::access::read_write;
            const pvmm::access_descriptor d{pvmm::location::device(r.device), a};
            unwrap(r.get("set_access").set_access(offset, size, {d}));
          },
          "offset"_a, "size"_a, "access"_a = "read_write")
      .def_prop_ro("mapping_count", [](const py_reservation& r) { return r.get("mapping_count").mapping_count(); });
  bind_memory(
      reservation, "Reservation", [](const pvmm::address_reservation& r) { return r.address(); },
      [](const pvmm::address_reservation& r) { return r.size(); });

  // ---- growable buffers ----
  auto growable = nb::class_<py_growable>(m, "GrowableBuffer", "A buffer that grows in place (VMM chunks).");
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
            {
              nb::gil_scoped_release release;
              g.ptr = std::make_shared<pvmm::growable_buffer>(unwrap(pvmm::growable_buffer::create(o)));
            }
            return g;
          },
          "device"_a = 0, "chunk_size"_a = 0, "reserve_size"_a = 0, "exportable"_a = false)
      .def(
          "resize",
          [](py_growable& g, std::size_t size) {
            auto& b = g.get("resize");
            pvmm::resize_outcome out;
            {
              nb::gil_scoped_release release;
              out = unwrap(b.resize(size));
            }
            nb::dict d;
            d["moved"] = out.moved;
            d["address"] = reinterpret_cast<std::uintptr_t>(out.address);
            d["chunks_added"] = out.chunks_added;
            d["chunks_removed"] = out.chunks_removed;
            return d;
          },
          "size"_a, "Grows or shrinks to at least `size` bytes; says whether the buffer moved.")
      .def_prop_ro("capacity", [](const py_growable& g) { return g.get("capacity").capacity(); })
      .def_prop_ro("chunk_size", [](const py_growable& g) { return g.get("chunk_size").chunk_size(); })
      .def(
          "export",
          [](const py_growable& g) {
            auto e = unwrap(pvmm::export_buffer(g.get("export"), pvmm::handle_types::posix_fd));
            auto bytes = e.descriptor.serialize();
            std::vector<int> fds;
            for (auto& fd : e.fds) fds.push_back(fd.detach());
            return nb::make_tuple(nb::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size()), fds);
          },
          "(descriptor bytes, fds): the caller owns the fds (pvmm.ExportedBuffer wraps and pickles them).");
  bind_memory(
      growable, "GrowableBuffer", [](const pvmm::growable_buffer& b) { return b.data(); },
      [](const pvmm::growable_buffer& b) { return b.size(); });

  auto imported = nb::class_<py_imported>(m, "ImportedBuffer", "Another process's exported buffer, mapped here.");
  imported.def_static(
      "open",
      [](nb::bytes descriptor, const std::vector<int>& fds, int device) {
        auto d = unwrap(pvmm::buffer_descriptor::parse(reinterpret_cast<const std::uint8_t*>(descriptor.c_str()),
                                                       descriptor.size(), fds.size()));
        const pvmm::access_descriptor access{pvmm::location::device(device), pvmm::access::read_write};
        py_imported i;
        i.device = device;
        i.ptr =
            std::make_shared<pvmm::imported_buffer>(unwrap(pvmm::import_buffer(d, fds.data(), fds.size(), {access})));
        return i;
      },
      "descriptor"_a, "fds"_a, "device"_a = 0, "Imports (the fds stay the caller's).");
  bind_memory(
      imported, "ImportedBuffer", [](const pvmm::imported_buffer& b) { return b.data(); },
      [](const pvmm::imported_buffer& b) { return b.size(); });

  // ---- pinned and managed ----
  auto pinned = nb::class_<py_pinned>(m, "PinnedAllocation", "Page-locked host memory.");
  pinned.def_static(
      "create",
      [](std::size_t size) {
        py_pinned p;
        p.label = memory_label::pinned;
        p.ptr = std::make_shared<pvmm::pinned_allocation>(unwrap(pvmm::pinned_allocation::create(size)));
        return p;
      },
      "size"_a);
  bind_memory(
      pinned, "PinnedAllocation", [](const pvmm::pinned_allocation& b) { return b.data(); },
      [](const pvmm::pinned_allocation& b) { return b.size(); });

  nb::class_<py_pinned_pool>(m, "PinnedPool",
                             "Page-locked staging buffers, reused once the copies that read them have completed "
                             "(pvmm::pinned_pool).")
      .def_static(
          "create",
          [](int device, bool driver_pool) {
            pvmm::pinned_pool_options o;
            o.device = device;
            o.driver_pool = driver_pool;
            return py_pinned_pool{std::make_shared<pvmm::pinned_pool>(unwrap(pvmm::pinned_pool::create(o)))};
          },
          "device"_a = 0, "driver_pool"_a = true)
      .def(
          "allocate",
          [](const py_pinned_pool& p, std::size_t size) {
            return reinterpret_cast<std::uintptr_t>(unwrap(p.get("allocate").allocate(size)));
          },
          "size"_a, "A pointer (int) the host may write at once; give it back with deallocate.")
      .def(
          "deallocate",
          [](const py_pinned_pool& p, std::uintptr_t pointer, nb::handle stream) {
            auto& pool = p.get("deallocate");
            unwrap(pool.deallocate(reinterpret_cast<void*>(pointer), pvmm_py::stream_of(stream, pool.device())));
          },
          "pointer"_a, "stream"_a,
          "Gives the block back in `stream`'s order (a pvmm.Stream or a foreign one): the stream of its last use.")
      .def(
          "trim", [](const py_pinned_pool& p) { unwrap(p.get("trim").trim()); },
          nb::call_guard<nb::gil_scoped_release>(), "Waits for the cached blocks' copies and gives them back.")
      .def("stats",
           [](const py_pinned_pool& p) {
             const auto st = p.get("stats").stats();
             nb::dict d;
             d["reserved"] = st.reserved;
             d["live"] = st.live;
             d["live_blocks"] = st.live_blocks;
             d["cached_blocks"] = st.cached_blocks;
             d["cache_hits"] = st.cache_hits;
             d["new_blocks"] = st.new_blocks;
             d["passed_over"] = st.passed_over;
             return d;
           })
      .def_prop_ro("source",
                   [](const py_pinned_pool& p) {
                     return p.get("source").source() == pvmm::pinned_source::driver_pool ? "driver_pool"
                                                                                         : "pinned_allocations";
                   })
      .def("close", [](py_pinned_pool& p) { p.ptr.reset(); })
      .def_prop_ro("closed", [](const py_pinned_pool& p) { return !p.ptr; })
      .def(
          "__enter__", [](py_pinned_pool& self) -> py_pinned_pool& { return self; }, nb::rv_policy::reference)
      .def("__exit__", [](py_pinned_pool& p, nb::args) { p.ptr.reset(); });

  auto managed = nb::class_<py_managed>(m, "ManagedAllocation", "Managed (unified) memory.");
  managed.def_static(
      "create",
      [](std::size_t size) {
        py_managed p;
        p.label = memory_label::managed;
        p.ptr = std::make_shared<pvmm::managed_allocation>(unwrap(pvmm::managed_allocation::create(size)));
        return p;
      },
      "size"_a);
  bind_memory(
      managed, "ManagedAllocation", [](const pvmm::managed_allocation& b) { return b.data(); },
      [](const pvmm::managed_allocation& b) { return b.size(); });

  // ---- pools ----
  auto pool_allocation = nb::class_<py_pool_allocation>(m, "PoolAllocation", "One allocation from a MemoryPool.");
  pool_allocation.def(
      "free",
      [](py_pool_allocation& a, const py_stream* on) {
        auto& alloc = a.get("free");
        if (on) {
          unwrap(alloc.free_async(stream_arg(*on)));
        } else {
          unwrap(alloc.release());
        }
        a.close();
      },
      "stream"_a = nb::none(), "Frees in `stream`'s order (default: the stream it was allocated on).");
  bind_memory(
      pool_allocation, "PoolAllocation", [](const pvmm::pool_allocation& b) { return b.data(); },
      [](const pvmm::pool_allocation& b) { return b.size(); });

  nb::class_<py_pool>(m, "MemoryPool", "A stream-ordered memory pool.")
      .def_static(
          "create",
          [](int device, bool exportable, std::size_t max_size) {
            pvmm::pool_properties p;
            p.location = pvmm::location::device(device);
            p.max_size = max_size;
            if (exportable) p.exportable = pvmm::handle_types::posix_fd;
            py_pool pool;
            pool.device = device;
            pool.ptr = std::make_shared<pvmm::memory_pool>(unwrap(pvmm::memory_pool::create(p)));
            return pool;
          },
          "device"_a = 0, "exportable"_a = false, "max_size"_a = 0)
      .def_static(
          "default",
          [](int device) {
            py_pool pool;
            pool.device = device;
            pool.ptr = std::make_shared<pvmm::memory_pool>(unwrap(pvmm::memory_pool::default_pool(device)));
            return pool;
          },
          "device"_a = 0, "The device's default pool (not owned; its release threshold is the driver's, 0).")
      .def_prop_rw(
          "release_threshold",
          [](const py_pool& p) { return unwrap(p.get("release_threshold").attributes()).release_threshold; },
          [](const py_pool& p, std::uint64_t bytes) {
            unwrap(p.get("release_threshold").set_release_threshold(bytes));
          },
          "Reserved bytes above this go back at a synchronize (2**64-1 keeps everything; 0 gives all back).")
      .def(
          "allocate",
          [](const py_pool& p, std::size_t size, nb::handle stream) {
            const auto& s = nb::cast<const py_stream&>(stream);
            py_pool_allocation a;
            a.device = p.device;
            a.ptr = std::make_shared<pvmm::pool_allocation>(unwrap(p.get("allocate").allocate(size, stream_arg(s))));
            a.stream = nb::borrow(stream);
            return a;
          },
          "size"_a, "stream"_a)
      .def(
          "allocate_async",
          [](const py_pool& p, std::size_t size, const py_stream& s) {
            return reinterpret_cast<std::uintptr_t>(
                unwrap(p.get("allocate_async").allocate_async(size, stream_arg(s))));
          },
          "size"_a, "stream"_a, "A raw pointer (int) to give back with free_async.")
      .def(
          "free_async",
          [](const py_pool& p, std::uintptr_t pointer, const py_stream& s) {
            unwrap(p.get("free_async").free_async(reinterpret_cast<void*>(pointer), stream_arg(s)));
          },
          "pointer"_a, "stream"_a)
      .def("usage",
           [](const py_pool& p) {
             auto u = unwrap(p.get("usage").usage());
             nb::dict d;
             d["reserved_current"] = u.reserved_current;
             d["reserved_high"] = u.reserved_high;
             d["used_current"] = u.used_current;
             d["used_high"] = u.used_high;
             return d;
           })
      .def(
          "export_fd",
          [](const py_pool& p) {
            auto e = unwrap(p.get("export_fd").export_posix_fd());
            return nb::make_tuple(e.fd.detach(), nb::bytes(reinterpret_cast<const char*>(e.id.bytes.data()), 16));
          },
          "(fd, pool id bytes): the caller owns the fd.")
      .def_static(
          "import_fd",
          [](int fd, nb::bytes id, int device) {
            pvmm::pool_export e;
            e.fd = pvmm::owned_fd(::dup(fd));
            if (id.size() != e.id.bytes.size()) {
              pvmm::error err;
              err.code = pvmm::errc::invalid_argument;
              err.operation = "pvmm.MemoryPool.import_fd";
              err.arguments = "pool_id of " + std::to_string(id.size()) + " bytes";
              err.detail = "a pool id is 16 bytes (MemoryPool.export_fd's second value)";
              throw pvmm::exception(err);
            }
            std::memcpy(e.id.bytes.data(), id.c_str(), e.id.bytes.size());
            py_pool pool;
            pool.device = device;
            pool.ptr = std::make_shared<pvmm::memory_pool>(unwrap(pvmm::memory_pool::import_posix_fd(e, device)));
            return pool;
          },
          "fd"_a, "pool_id"_a, "device"_a = 0, "Imports an exported pool (the fd stays the caller's).")
      .def(
          "export_pointer",
          [](const py_pool& p, std::uintptr_t pointer) {
            auto e = unwrap(p.get("export_pointer").export_pointer(reinterpret_cast<void*>(pointer)));
            return nb::bytes(reinterpret_cast<const char*>(&e), sizeof e);
          },
          "pointer"_a)
      .def(
          "import_pointer",
          [](const py_pool& p, nb::bytes record, nb::handle stream) {
            pvmm::pool_pointer_export e;
            if (record.size() != sizeof e) {
              pvmm::error err;
              err.code = pvmm::errc::protocol_error;
              err.operation = "pvmm.MemoryPool.import_pointer";
              err.detail = "a pointer record is " + std::to_string(sizeof e) + " bytes";
              throw pvmm::exception(err);
            }
            std::memcpy(&e, record.c_str(), sizeof e);
            const auto& s = nb::cast<const py_stream&>(stream);
            py_pool_allocation a;
            a.device = p.device;
            a.ptr = std::make_shared<pvmm::pool_allocation>(
                unwrap(p.get("import_pointer").import_pointer(e, stream_arg(s))));
            a.stream = nb::borrow(stream);
            return a;
          },
          "record"_a, "stream"_a)
      .def("close", [](py_pool& p) { p.ptr.reset(); })
      .def_prop_ro("closed", [](const py_pool& p) { return !p.ptr; })
      .def(
          "__enter__", [](py_pool& self) -> py_pool& { return self; }, nb::rv_policy::reference)
      .def("__exit__", [](py_pool& p, nb::args) { p.ptr.reset(); })
      .def("__repr__",
           [](const py_pool& p) {
             return std::string("<pvmm.MemoryPool device=") + std::to_string(p.device) + (p.ptr ? "" : " closed") + ">";
           })
      .def(
          "install_c_allocator", [](const py_pool& p) { install_c_source(p.ptr); },
          "Makes the C entry points (pvmm_torch_alloc/free) allocate from this pool.");

  // ---- the growable arena (PyTorch's allocator on VMM) ----
  nb::class_<py_arena>(m, "GrowableArena",
                       "Allocations in one reserved range whose physical memory is mapped as they reach it and "
                       "unmapped when the highest ones go; addresses never move.")
      .def(
          "__init__",
          [](py_arena* self, int device, std::size_t reserve_size, std::size_t chunk_size) {
            std::unique_ptr<pvmm_py::growable_arena> a;
            {
              nb::gil_scoped_release release;
              a = unwrap(pvmm_py::growable_arena::create(device, reserve_size, chunk_size));
            }
            new (self) py_arena{std::shared_ptr<pvmm_py::growable_arena>(std::move(a))};
          },
          "device"_a = 0, "reserve_size"_a = 0, "chunk_size"_a = 0,
          "reserve_size: the address range reserved up front, all the arena can ever hold (0: the device's total "
          "memory); chunk_size: the unit of physical memory mapped (0: pvmm's default, 64 MiB).")
      .def(
          "allocate",
          [](const py_arena& a, std::size_t size) {
            auto& arena = a.get("allocate");
            nb::gil_scoped_release release;  // may map chunks
            return reinterpret_cast<std::uintptr_t>(unwrap(arena.allocate(size)));
          },
          "size"_a, "An address (int), a multiple of 512; out_of_memory when the reservation cannot hold it.")
      .def(
          "free",
          [](const py_arena& a, std::uintptr_t p) {
            auto& arena = a.get("free");
            nb::gil_scoped_release release;  // may unmap chunks
            unwrap(arena.free(reinterpret_cast<void*>(p)));
          },
          "address"_a, "Frees an allocation no work in flight uses; the chunks above the highest one left go back.")
      .def("statistics",
           [](const py_arena& a) {
             auto st = a.get("statistics").statistics();
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
          "address", [](const py_arena& a) { return reinterpret_cast<std::uintptr_t>(a.get("address").base()); },
          "The start of the reserved range.")
      .def(
          "view",
          [](const py_arena& a, std::uintptr_t address, const std::string& dtype,
             std::optional<std::vector<std::size_t>> shape) {
            auto& arena = a.get("view");
            void* p = reinterpret_cast<void*>(address);
            return make_view(a.ptr, p, arena.size_of(p), memory_label::device, arena.device(), dtype, std::move(shape),
                             0);
          },
          "address"_a, "dtype"_a = "uint8", "shape"_a = nb::none(), "An array over one allocation (keeps the arena).")
      .def(
          "install_c_allocator",
          [](const py_arena& a) {
            (void)a.get("install");
            install_c_source(a.ptr);
          },
          "Makes the C entry points (pvmm_torch_alloc/free) allocate from this arena.")
      .def_prop_ro("closed", [](const py_arena& a) { return !a.ptr; })
      .def(
          "close",
          [](py_arena& a) {
            uninstall_c_source(a.ptr);
            nb::gil_scoped_release release;
            a.ptr.reset();
          },
          "Drops this owner's hold (and the C entry points' if installed); views keep the memory.")
      .def(
          "__enter__", [](py_arena& self) -> py_arena& { return self; }, nb::rv_policy::reference)
      .def("__exit__",
           [](py_arena& a, nb::args) {
             uninstall_c_source(a.ptr);
             a.ptr.reset();
           })
      .def("__repr__", [](const py_arena& a) {
        if (!a.ptr) return std::string("<pvmm.GrowableArena closed>");
        auto st = a.ptr->statistics();
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
            new (self) py_sleeping{
                std::shared_ptr<pvmm_py::sleeping_allocator>(unwrap(pvmm_py::sleeping_allocator::create(device)))};
          },
          "device"_a = 0)
      .def(
          "allocate",
          [](const py_sleeping& s, std::size_t size, const std::string& tag) {
            return reinterpret_cast<std::uintptr_t>(unwrap(s.get("allocate").allocate(size, tag)));
          },
          "size"_a, "tag"_a = "default", "An address (int) that stays the same across sleep and wake.")
      .def(
          "free",
          [](const py_sleeping& s, std::uintptr_t p) { unwrap(s.get("free").free(reinterpret_cast<void*>(p))); },
          "address"_a)
      .def(
          "sleep",
          [](const py_sleeping& s, const std::vector<std::string>& tags, bool offload) {
            auto& a = s.get("sleep");
            nb::gil_scoped_release release;
            unwrap(a.sleep(tags, offload));
          },
          "tags"_a = std::vector<std::string>{}, "offload"_a = true,
          "Copies (offload=True) or discards the tagged allocations, then gives their physical memory back.")
      .def(
          "wake",
          [](const py_sleeping& s, const std::vector<std::string>& tags) {
            auto& a = s.get("wake");
            nb::gil_scoped_release release;
            unwrap(a.wake(tags));
          },
          "tags"_a = std::vector<std::string>{}, "Maps new memory at the same addresses; restores offloaded contents.")
      .def(
          "statistics",
          [](const py_sleeping& s, std::optional<std::string> tag) {
            auto st = s.get("statistics").statistics(tag);
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
            auto& a = s.get("view");
            void* p = reinterpret_cast<void*>(address);
            const std::size_t size = a.size_of(p);
            return make_view(s.ptr, p, size, memory_label::device, a.device(), dtype, std::move(shape), 0);
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
          "install_c_allocator",
          [](const py_sleeping& s) {
            (void)s.get("install");
            install_c_source(s.ptr);
          },
          "Makes the C entry points (pvmm_torch_alloc/free) allocate from this allocator, with use_tag's tag.")
      .def("close",
           [](py_sleeping& s) {
             uninstall_c_source(s.ptr);
             nb::gil_scoped_release release;
             s.ptr.reset();
           })
      .def(
          "__enter__", [](py_sleeping& self) -> py_sleeping& { return self; }, nb::rv_policy::reference)
      .def("__exit__",
           [](py_sleeping& s, nb::args) {
             uninstall_c_source(s.ptr);
             s.ptr.reset();
           })
      .def("__repr__", [](const py_sleeping& s) {
        if (!s.ptr) return std::string("<pvmm.SleepingAllocator closed>");
        auto st = s.ptr->statistics(std::nullopt);
        return "<pvmm.SleepingAllocator allocations=" + std::to_string(st.allocations) +
               " resident_bytes=" + std::to_string(st.resident_bytes) + " asleep=" + std::to_string(st.asleep) + ">";
      });
}
