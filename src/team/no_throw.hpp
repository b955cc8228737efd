// The team layer's public calls run their body under no_throw: no exception leaves the library (memory running
// out anywhere in a step is errc::out_of_memory, as in the bootstrap's calls).
#pragma once

#include <new>

#include <pvmm/error.hpp>

namespace pvmm::detail {

/// Runs `body` (returning R: a result or status); std::bad_alloc becomes errc::out_of_memory and any other
/// exception errc::backend_error, named as `name`'s. Where even the error's text cannot be made, the code alone.
template <class R, class Body>
R no_throw(const char* name, Body&& body) noexcept {
  try {
    try {
      return body();
    } catch (const std::bad_alloc&) {
      error e;
      e.code = errc::out_of_memory;
      e.operation = name;
      e.detail = "memory ran out";
      return R(std::move(e));
    } catch (...) {
      error e;
      e.code = errc::backend_error;
      e.operation = name;
      e.detail = "an exception was thrown inside the library";
      return R(std::move(e));
    }
  } catch (...) {  // the error's text could not be made either
    error e;
    e.code = errc::out_of_memory;
    return R(std::move(e));
  }
}

}  // namespace pvmm::detail
