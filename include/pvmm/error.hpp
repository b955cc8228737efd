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

namespace pvmm {

/// Every portable error code once: X(name, value, meaning). The enum, to_string and the documentation below
/// come from this one list. Values are stable (they may be stored or sent).
#define PVMM_ERRC_LIST(X)                                                                                  \
  X(invalid_argument, 1, "an argument is malformed (null pointer, empty list, ...)")                       \
  X(invalid_size, 2, "a size is zero")                                                                     \
  X(unaligned, 3, "a size or offset is not a multiple of the granularity that applies")                    \
  X(invalid_alignment, 4, "an alignment is not a power of two or not a multiple of the granularity")       \
  X(invalid_device, 5, "the device ordinal does not exist")                                                \
  X(invalid_location, 6, "the location kind or id is not valid for this operation")                        \
  X(out_of_range, 7, "a range falls outside its reservation, allocation or multicast object")              \
  X(overlapping_mapping, 8, "the target range already holds a mapping")                                    \
  X(partial_mapping, 9, "the range cuts through a mapping; pvmm works on whole mappings")                  \
  X(not_mapped, 10, "the range (or address) is not covered by mappings")                                   \
  X(busy, 11, "the object has dependants, or another thread is changing it")                               \
  X(already_released, 12, "the owner was released or moved from")                                          \
  X(invalid_handle, 13, "a handle or fd does not name memory pvmm can import")                             \
  X(handle_type_not_requested, 14, "export of a handle type the allocation was not created for")           \
  X(not_supported, 15, "the backend or device lacks the capability")                                       \
  X(not_permitted, 16, "the system refuses (for example: fabric handles without an IMEX channel)")         \
  X(address_unavailable, 17, "a fixed-address hint was not honoured; the range was given back")            \
  X(out_of_memory, 18, "physical memory or address space is exhausted, or a size exceeds what can exist")  \
  X(backend_unavailable, 19, "no driver, no runtime, or no device")                                        \
  X(runtime_too_old, 20, "the runtime is older than the version whose VMM works")                          \
  X(timeout, 21, "a transfer did not complete in time")                                                    \
  X(peer_rejected, 22, "the peer's credentials did not satisfy the caller's rule")                         \
  X(protocol_error, 23, "a message or descriptor from a peer is malformed, truncated or inconsistent")     \
  X(system_error, 24, "an operating-system call failed (native_name holds the errno name)")                \
  X(backend_error, 25, "the backend failed in a way with no portable meaning (see native_name)")           \
  X(already_registered, 26, "host memory in the range is page-locked (registered) already")                \
  X(not_registered, 27, "the address does not start a registered host range")                              \
  X(peer_lost, 28, "a peer (process or rank) exited, closed its end or aborted before the step completed") \
  X(team_mismatch, 29, "the ranks of a team disagree: size, rank, backend, version or window options differ")

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
