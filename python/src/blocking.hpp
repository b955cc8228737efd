// Blocking calls from Python: the one timeout rule, signal checks at least every 100 ms, and exceptions raised by
// Python callbacks (a store, an allgather) carried back to the caller as themselves.
#pragma once

#include <nanobind/nanobind.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include <algorithm>
#include <string>

#include <pvmm/ipc.hpp>

#include "common.hpp"

namespace pvmm_py {

/// How often a blocking call looks for signals (Ctrl-C) while it waits.
inline constexpr std::chrono::milliseconds signal_slice{100};

/// The one timeout rule (docs/design.md "One convention"): milliseconds; pvmm.WAIT_FOREVER (-1) waits without a
/// deadline (pvmm::ipc::wait_forever); 0 expires now (try once); any other negative value is InvalidArgumentError
/// naming `parameter` of `operation`.
inline std::chrono::milliseconds checked_timeout(std::int64_t ms, const char* operation,
                                                 const char* parameter = "timeout_ms") {
  if (ms == -1) return pvmm::ipc::wait_forever;
  if (ms < 0)
    raise(pvmm::errc::invalid_argument, operation,
          std::string(parameter) + " is negative: milliseconds >= 0, or pvmm.WAIT_FOREVER (-1) for no deadline",
          std::string(parameter) + "=" + std::to_string(ms));
  return std::chrono::milliseconds(ms);
}

/// With the GIL: raises the exception a signal handler raised (KeyboardInterrupt for Ctrl-C), if any.
inline void check_signals() {
  if (PyErr_CheckSignals() != 0) throw nb::python_error();
}

/// Runs attempt(slice) with the GIL released, in slices of at most signal_slice, until it returns anything but
/// errc::timeout or `timeout` has passed, checking for signals (with the GIL) between slices. `attempt` must be
/// safe to repeat after a timeout (nothing lost: an accept, a receive of a whole message, a connect).
template <class F>
auto wait_in_slices(std::chrono::milliseconds timeout, F attempt) -> decltype(attempt(timeout)) {
  const bool forever = timeout == pvmm::ipc::wait_forever;
  const auto until =
      forever ? std::chrono::steady_clock::time_point::max() : std::chrono::steady_clock::now() + timeout;
  for (;;) {
    std::chrono::milliseconds slice = signal_slice;
    if (!forever) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      slice = std::max(std::chrono::milliseconds(0), std::min(left, signal_slice));
    }
    auto r = [&] {
      nb::gil_scoped_release release;
      return attempt(slice);
    }();
    if (r || r.code() != pvmm::errc::timeout) return r;
    if (!forever && std::chrono::steady_clock::now() >= until) return r;
    check_signals();
  }
}

/// The first exception a Python callback raised during one blocking call, kept to be raised as itself when the
/// call returns; and whether the call was cancelled (a signal arrived), which the callbacks check.
class callback_errors {
 public:
  /// Keeps `e` if it is the first (GIL held).
  void keep(nb::python_error&& e) {
    std::lock_guard<std::mutex> guard(lock_);
    if (!first_) first_ = std::make_unique<nb::python_error>(std::move(e));
  }
  bool any() const {
    std::lock_guard<std::mutex> guard(lock_);
    return first_ != nullptr;
  }
  /// Raises the kept exception as itself (GIL held); nothing when none was kept.
  void rethrow() {
    std::unique_ptr<nb::python_error> e;
    {
      std::lock_guard<std::mutex> guard(lock_);
      e = std::move(first_);
    }
    if (e) throw nb::python_error(std::move(*e));
  }
  void cancel() noexcept { cancelled_.store(true); }
  bool cancelled() const noexcept { return cancelled_.load(); }

 private:
  mutable std::mutex lock_;
  std::unique_ptr<nb::python_error> first_;
  std::atomic<bool> cancelled_{false};
};

/// Runs `call` (a blocking pvmm call that may run Python callbacks, which take the GIL) on a worker thread while this
/// thread waits with the GIL released and checks for signals every signal_slice. On a signal: `cancel()` (abort
/// the team or bootstrap: peers get peer_lost naming this rank), wait for `call` to return, raise the signal's
/// exception. Otherwise `call`'s value; an exception a callback kept in `errors` is raised as itself first.
template <class F, class C>
auto run_interruptible(F call, C cancel, callback_errors& errors) -> decltype(call()) {
  auto done = std::async(std::launch::async, std::move(call));
  for (;;) {
    bool ready = false;
    {
      nb::gil_scoped_release release;
      ready = done.wait_for(signal_slice) == std::future_status::ready;
    }
    if (ready) break;
    if (PyErr_CheckSignals() != 0) {
      nb::python_error signal;  // takes the raised exception
      errors.cancel();
      cancel();
      {
        nb::gil_scoped_release release;
        done.wait();
      }
      throw signal;
    }
  }
  auto value = done.get();
  if (errors.any()) {  // a callback raised: tell the peers (abort), then raise it as itself
    errors.cancel();
    cancel();
    errors.rethrow();
  }
  return value;
}

}  // namespace pvmm_py
