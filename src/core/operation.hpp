// The operation context every neutral operation runs in: its name and lazily formatted arguments, so every
// error it reports says where and with what.
#pragma once

#include <string>
#include <type_traits>
#include <utility>

#include <pvmm/error.hpp>

#include "core/fault_injection.hpp"
#include "core/fd_budget.hpp"
#include "core/propagate.hpp"

namespace pvmm::detail {

/// An operation's arguments as text, formatted only if an error needs them: formatting on every call would
/// cost more than the driver calls pvmm wraps. Holds a reference to a callable that must outlive it (name the
/// lambda before the operation: `auto args = [&] {...}; const operation op{"...", args};`).
class lazy_args {
 public:
  lazy_args() = default;
  lazy_args(const char* text) : text_(text) {}
  template <class F, class = std::enable_if_t<std::is_invocable_r_v<std::string, const F&>>>
  lazy_args(const F& f) : object_(&f), call_([](const void* o) { return (*static_cast<const F*>(o))(); }) {}
  std::string operator()() const { return call_ ? call_(object_) : std::string(text_ ? text_ : ""); }

 private:
  const char* text_ = nullptr;
  const void* object_ = nullptr;
  std::string (*call_)(const void*) = nullptr;
};

/// One neutral operation ("pvmm::address_reservation::map") and its arguments.
class operation {
 public:
  operation(const char* name, lazy_args args = {}) noexcept : name_(name), args_(args) {}
  const char* name() const noexcept { return name_; }
  // Cold: the compiler moves every path that ends in one of these out of the caller's hot code (into .text.unlikely,
  // with the error text's formatting), so a successful call touches fewer code lines and pages - what a real driver
  // call evicts between two pvmm calls (pvmm-own-cost's cold table).
  /// An error pvmm raises by itself (no native error).
  [[gnu::cold]] error fail(errc code, std::string detail, std::string hint = {}) const;
  /// Adds this operation and its arguments to an error a step reported. An inner operation's error keeps its
  /// name and arguments; this operation is added to its detail as "(in name(arguments))".
  [[gnu::cold]] error wrap(error e) const;
  /// Reports an inner operation's error as this operation's own (its name and arguments replace the inner).
  [[gnu::cold]] error take_over(error e) const;
  /// Runs backend step `call` (counted, fault-injectable); its error comes back wrapped.
  template <class F>
  auto step(const char* call, F&& f) const -> decltype(f()) {
    auto r = call_backend(call, std::forward<F>(f));
    if (!r) return wrap(std::move(r).error());
    return r;
  }
  /// As step, for a backend call that opens an fd (export, import): a failure while this process is out of fds is
  /// reported as that, whatever the backend said (drivers may answer OUT_OF_MEMORY or INVALID_VALUE).
  template <class F>
  auto fd_step(const char* call, F&& f) const -> decltype(f()) {
    // Refused before the backend is called when no fd is free: a driver that met a full fd table stayed broken
    // after fds were free again (CUDA 13.0, driver 580: pool exports failed with CUDA_ERROR_OPERATING_SYSTEM, then
    // destroying the pool crashed), so pvmm never leads it there. The blame below covers a race for the last fd.
    if (const int err = probe_fd_exhaustion())
      return wrap(fd_exhaustion_error(call, err, "refused before calling the backend"));
    auto r = call_backend(call, std::forward<F>(f));
    if (!r) return wrap(blame_fd_exhaustion(call, std::move(r).error()));
    return r;
  }

 private:
  const char* name_;
  lazy_args args_;
};

}  // namespace pvmm::detail
