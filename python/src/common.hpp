// Shared by the module's sources: unwrapping pvmm's results into Python exceptions, error records, and the
// bind_<area> functions module.cpp calls (one source file per area).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include <nanobind/nanobind.h>

#include <pvmm/pvmm.hpp>

#ifndef PVMM_PY_BACKEND
#define PVMM_PY_BACKEND "host"
#endif
#ifndef PVMM_PY_ROCM
#define PVMM_PY_ROCM 0
#endif

namespace pvmm_py {

namespace nb = nanobind;

constexpr bool backend_is(const char* name) { return std::string_view(PVMM_PY_BACKEND) == name; }

inline void put_items(nb::dict&) {}
template <class V, class... Rest>
void put_items(nb::dict& d, const char* key, const V& value, const Rest&... rest) {
  d[key] = value;
  put_items(d, rest...);
}
/// A dict of the (key, value) pairs given in turn: dict_of("name", b.name, "available", b.available). The one body
/// of every record the bindings hand Python as a dict (statistics, queries).
template <class... Items>
nb::dict dict_of(const Items&... items) {
  static_assert(sizeof...(Items) % 2 == 0, "dict_of takes (key, value) pairs");
  nb::dict d;
  put_items(d, items...);
  return d;
}

/// The value of `r`, or a pvmm::exception (translated to the Python class of its errc) with the whole record.
template <class T>
T unwrap(pvmm::result<T>&& r) {
  if (!r) throw pvmm::exception(std::move(r).error());
  return std::move(r).value();
}
inline void unwrap(pvmm::status&& s) {
  if (!s) throw pvmm::exception(std::move(s).error());
}

/// An error record of the bindings' own (the library's calls fill theirs).
inline pvmm::error make_error(pvmm::errc code, const char* operation, std::string detail, std::string arguments = {},
                              std::string hint = {}) {
  pvmm::error e;
  e.code = code;
  e.operation = operation;
  e.detail = std::move(detail);
  e.arguments = std::move(arguments);
  e.hint = std::move(hint);
  return e;
}
/// Throws make_error(...) as the Python class of `code`.
[[noreturn]] inline void raise(pvmm::errc code, const char* operation, std::string detail, std::string arguments = {},
                               std::string hint = {}) {
  throw pvmm::exception(make_error(code, operation, std::move(detail), std::move(arguments), std::move(hint)));
}

/// Sets the Python exception of `e`'s errc class with the whole record (bind_errors.cpp; GIL held).
void set_python_error(const pvmm::error& e);

/// pvmm's error for a call on a closed Python owner.
[[noreturn]] inline void throw_closed(const char* operation) {
  raise(pvmm::errc::already_released, operation, "this object was closed", {},
        "views taken before close() stay valid; the owner itself cannot be used again");
}

/// Where memory lives, for DLPack's device label.
enum class memory_label { device, pinned, managed };

/// A stream for one call: the reference and a share of what keeps it valid (an owned pvmm.Stream stays alive for the
/// call even if another thread closes it).
struct stream_use {
  pvmm::stream_ref ref;
  std::shared_ptr<const void> keep;
  operator pvmm::stream_ref() const noexcept { return ref; }  // NOLINT: used where a stream_ref is expected
};
/// A pvmm.Stream, or a foreign stream (int handle, __cuda_stream__, torch's, CuPy's) of `device`; TypeError naming
/// `parameter` for anything else (bind_stream.cpp).
stream_use stream_of(nb::handle obj, int device, const char* parameter = "stream");

/// Properties of device memory on `device` (exportable as a POSIX fd when asked).
pvmm::allocation_properties device_props(int device, bool exportable);

/// Makes the C entry points allocate from `pool` (bind_allocators.cpp).
void install_c_pool(const std::shared_ptr<pvmm::memory_pool>& pool);

// One function per area, called by module.cpp in this order.
void bind_errors(nb::module_& m);      // bind_errors.cpp
void bind_device(nb::module_& m);      // bind_device.cpp
void bind_stream(nb::module_& m);      // bind_stream.cpp
void bind_vmm(nb::module_& m);         // bind_vmm.cpp: physical allocations, reservations
void bind_growable(nb::module_& m);    // bind_growable.cpp: growable and imported buffers
void bind_pinned(nb::module_& m);      // bind_pinned.cpp: pinned and managed memory, the pinned pool
void bind_pool(nb::module_& m);        // bind_pool.cpp
void bind_allocators(nb::module_& m);  // bind_allocators.cpp: arena, sleeping allocator, C entry points
void bind_team(nb::module_& m);        // bind_team.cpp
void bind_window(nb::module_& m);      // bind_window.cpp
void bind_heap(nb::module_& m);        // bind_heap.cpp: the symmetric heap
void bind_transport(nb::module_& m);   // transport.cpp
void bind_snapshot(nb::module_& m);    // bind_snapshot.cpp: memory snapshots, history

}  // namespace pvmm_py
