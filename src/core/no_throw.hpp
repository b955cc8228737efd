// The library's one no-throw edge: every face (the C guard in src/c_api, the team layer's public calls, the
// bootstrap's adapter calls) runs its body under catch_all or no_throw, so no exception leaves pvmm, and the
// out-of-memory path allocates nothing (static texts; the error record is built only when memory allows, else the
// code alone is returned).
#pragma once

#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#include <pvmm/error.hpp>

namespace pvmm::detail {

/// The static text of memory running out (std::bad_alloc).
inline constexpr const char* out_of_memory_text = "memory ran out inside pvmm (std::bad_alloc)";

/// An exception caught at the library's edge, classified without allocating: std::bad_alloc and std::length_error
/// (a container asked for more than any memory holds: a SIZE_MAX byte count) are errc::out_of_memory, a
/// pvmm::exception carries its error, anything else is errc::backend_error. `what` (e.what(), or nullptr) and
/// `carried` are valid only during the handler call.
struct caught_exception {
  errc code;
  const char* detail;  ///< static text
  const char* what;
  const error* carried;
};

/// Runs `body`; an exception is classified and handed to `handle(const caught_exception&)`, which returns what
/// body would have. If `handle` throws too (its error text could not be made), `fallback()` (noexcept, allocating
/// nothing) gives the answer.
template <class Body, class Handle, class Fallback>
auto catch_all(Body&& body, Handle&& handle, Fallback&& fallback) noexcept -> decltype(body()) {
  try {
    try {
      return body();
    } catch (const std::bad_alloc&) {
      return handle(caught_exception{errc::out_of_memory, out_of_memory_text, nullptr, nullptr});
    } catch (const std::length_error& e) {
      return handle(caught_exception{
          errc::out_of_memory, "a size larger than any memory was asked for (std::length_error)", e.what(), nullptr});
    } catch (const pvmm::exception& e) {
      return handle(caught_exception{e.code(), "", e.what(), &e.error()});
    } catch (const std::exception& e) {
      return handle(
          caught_exception{errc::backend_error, "a C++ exception was thrown inside the library", e.what(), nullptr});
    } catch (...) {
      return handle(caught_exception{
          errc::backend_error, "an exception of unknown type was thrown inside the library (threw)", nullptr, nullptr});
    }
  } catch (...) {
    return fallback();
  }
}

/// An error of code `code` alone: no text, so nothing is allocated (moving it into a result allocates nothing).
inline error bare_error(errc code) noexcept {
  error e;
  e.code = code;
  return e;
}

/// The error of a caught exception, named as `name`'s (may throw std::bad_alloc: catch_all's fallback answers).
inline error to_error(const caught_exception& c, const char* name) {
  if (c.carried != nullptr) return *c.carried;
  error e;
  e.code = c.code;
  e.operation = name;
  e.detail = c.detail;
  if (c.what != nullptr && c.code != errc::out_of_memory) e.detail.append(": ").append(c.what);
  return e;
}

/// Runs `body` (returning R: a result or status); an exception becomes R's error (catch_all's classes), named as
/// `name`'s. Where even the error's text cannot be made, the code alone.
template <class R, class Body>
R no_throw(const char* name, Body&& body) noexcept {
  errc code = errc::out_of_memory;
  return catch_all(
      std::forward<Body>(body),
      [&](const caught_exception& c) -> R {
        code = c.code;
        return R(to_error(c, name));
      },
      [&]() noexcept -> R { return R(bare_error(code)); });
}

}  // namespace pvmm::detail
