// Shared by the module's sources: unwrapping pvmm's results into Python exceptions, and the owners' holder.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include <pvmm/pvmm.hpp>

namespace pvmm_py {

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
inline pvmm::error make_error(pvmm::errc code, const char* operation, std::string detail) {
  pvmm::error e;
  e.code = code;
  e.operation = operation;
  e.detail = std::move(detail);
  return e;
}

/// pvmm's error for a call on a closed Python owner.
[[noreturn]] inline void throw_closed(const char* operation) {
  pvmm::error e;
  e.code = pvmm::errc::already_released;
  e.operation = operation;
  e.detail = "this object was closed";
  e.hint = "views taken before close() stay valid; the owner itself cannot be used again";
  throw pvmm::exception(std::move(e));
}

/// Where memory lives, for DLPack's device label.
enum class memory_label { device, pinned, managed };

}  // namespace pvmm_py
