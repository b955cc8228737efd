// pvmm/error.hpp - portable error codes, the error record every operation reports, and result<T>.
//
// Every pvmm operation returns result<T>: it never throws (except std::bad_alloc) and never aborts.
// result<T>::value() is the throwing convenience: it throws pvmm::exception carrying the same record.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include <pvmm/errc_list.h>  // PVMM_ERRC_LIST: shared with the C interface (pvmm/pvmm.h)

namespace pvmm {

/// Portable error codes: identical on every backend for the same mistake (meanings in PVMM_ERRC_LIST).
enum class errc : int {
#define PVMM_ERRC_ENUMERATOR(name, value, meaning) name = value,
  PVMM_ERRC_LIST(PVMM_ERRC_ENUMERATOR)
#undef PVMM_ERRC_ENUMERATOR
};

/// The stable name of a code ("overlapping_mapping").
const char* to_string(errc code) noexcept;

/// What went wrong, where, with what, and what to do about it.
struct error {
  errc code = errc::backend_error;
  std::string operation;    ///< "pvmm::address_reservation::map"
  std::string arguments;    ///< "offset=0x200000, size=0x200000, ..."
  std::string detail;       ///< what exactly was wrong
  std::string native_name;  ///< "CUDA_ERROR_INVALID_VALUE", "EBADF", or empty when pvmm refused by itself
  long long native_code = 0;
  std::string hint;  ///< what to do, where pvmm knows

  /// One line holding everything above.
  std::string message() const;
};

/// Thrown by result<T>::value() on failure.
class exception : public std::runtime_error {
 public:
  explicit exception(pvmm::error e) : std::runtime_error(e.message()), error_(std::move(e)) {}
  const pvmm::error& error() const noexcept { return error_; }
  errc code() const noexcept { return error_.code; }

 private:
  pvmm::error error_;
};

/// A value or an error. Move-only when T is.
template <class T>
class [[nodiscard]] result {
 public:
  result(T value) : state_(std::in_place_index<0>, std::move(value)) {}
  result(pvmm::error e) : state_(std::in_place_index<1>, std::move(e)) {}

  bool has_value() const noexcept { return state_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }

  /// The value; throws pvmm::exception when this holds an error.
  T& value() & {
    check();
    return std::get<0>(state_);
  }
  T&& value() && {
    check();
    return std::get<0>(std::move(state_));
  }
  const T& value() const& {
    check();
    return std::get<0>(state_);
  }
  /// Access as std::optional / std::expected give it, except that an error throws instead of being undefined.
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  /// The value, or `fallback` when this holds an error (never throws).
  template <class U>
  T value_or(U&& fallback) const& {
    return has_value() ? std::get<0>(state_) : static_cast<T>(std::forward<U>(fallback));
  }
  template <class U>
  T value_or(U&& fallback) && {
    return has_value() ? std::get<0>(std::move(state_)) : static_cast<T>(std::forward<U>(fallback));
  }

  /// The error; precondition: !has_value().
  const pvmm::error& error() const& { return std::get<1>(state_); }
  pvmm::error&& error() && { return std::get<1>(std::move(state_)); }
  /// The error code, or errc{} (0) when this holds a value.
  errc code() const noexcept { return has_value() ? errc{} : std::get<1>(state_).code; }

 private:
  void check() const {
    if (!has_value()) throw exception(std::get<1>(state_));
  }
  std::variant<T, pvmm::error> state_;
};

/// Success or an error. The error record is built only on failure: a success costs a flag, which matters next to
/// driver calls that take well under a microsecond.
template <>
class [[nodiscard]] result<void> {
 public:
  // User-provided, so `return {};` does not zero the unused error storage first (a defaulted one would).
  result() noexcept {}
  result(pvmm::error e) : error_(std::move(e)) {}

  bool has_value() const noexcept { return !error_.has_value(); }
  explicit operator bool() const noexcept { return has_value(); }
  void value() const {
    if (error_) throw exception(*error_);
  }
  /// The error; precondition: !has_value().
  const pvmm::error& error() const& { return *error_; }
  pvmm::error&& error() && { return std::move(*error_); }
  errc code() const noexcept { return error_ ? error_->code : errc{}; }

 private:
  std::optional<pvmm::error> error_;
};

using status = result<void>;

}  // namespace pvmm
