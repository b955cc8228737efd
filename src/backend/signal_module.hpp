// The signal module as a driver loads it: what the cuda backend and the hip backend on HIP's NVIDIA platform share.
// signal_kernels.cu is compiled to PTX at build time (cmake: pvmm_embed_signal_module) and embedded; each backend
// loads it with its module calls (cuModule*, hipModule*: on NVIDIA those forward to cuModule*) once per context and
// launches its kernel with one thread on the caller's stream.
#pragma once

#include <mutex>
#include <utility>
#include <vector>

#include <new>

#include "backend/stream.hpp"
#include "backend/team_signal.hpp"
#include "core/deferred_release.hpp"
#include "core/propagate.hpp"

namespace pvmm::detail::backend {

/// Why the NVIDIA driver's signal kernels refuse a wait for a rank sharing the caller's context (issue 35: measured
/// on an H100, 8 of 180 barriers between 3 thread ranks of a process timed out with a live peer: its kernel was
/// enqueued at once but did not start until its siblings' waits had expired).
inline constexpr const char* same_context_waits_reason =
    "CUDA does not guarantee that kernels on different streams of one context run at the same time, so a kernel "
    "waiting for a rank in the same process and on the same device can stall until its timeout";

/// The module's one kernel (extern "C" in signal_kernels.cu).
inline constexpr const char* signal_kernel_name = "pvmm_signal_kernel";

/// The kernel's parameters in its order (signal_kernels.cu), as the drivers' launch calls take them: an array of
/// pointers to each value. Not copyable: the array points into the object.
class signal_kernel_arguments {
 public:
  explicit signal_kernel_arguments(const signal_work& w)
      : view_(w.view),
        op_(static_cast<unsigned>(w.op)),
        peer_(w.peer),
        channel_(w.channel),
        timeout_ns_(w.timeout_ns),
        value_(w.value),
        aborted_by_(w.aborted_by) {}
  signal_kernel_arguments(const signal_kernel_arguments&) = delete;
  signal_kernel_arguments& operator=(const signal_kernel_arguments&) = delete;
  void** params() { return params_; }

 private:
  window_view view_;
  unsigned op_;
  int peer_;
  int channel_;
  unsigned long long timeout_ns_;
  unsigned long long value_;
  unsigned aborted_by_;
  void* params_[7] = {&view_, &op_, &peer_, &channel_, &timeout_ns_, &value_, &aborted_by_};
};

/// After the kernel was launched on `s`: a host function behind it hands `work.keep` to the deferred list once the
/// kernel has run (let go of at the next enqueue, window or team release, or query_live_objects).
/// Where that cannot be enqueued, the reference is kept for the process's life (never let go before the kernel
/// ran: that would free memory the kernel touches).
inline void keep_until_run(const signal_work& work, stream_handle s, int device) noexcept {
  if (!work.keep) return;
  auto* held = new (std::nothrow) std::shared_ptr<const void>(work.keep);
  if (held == nullptr) return;
  // The host function only lists the holder (core/deferred_release.hpp): the last reference to a window may be
  // this one, and its teardown makes driver calls, which a host function may not.
  const auto let_go = [](void* p) { defer_release(static_cast<std::shared_ptr<const void>*>(p)); };
  // A capturing stream records the work into a graph that may be launched any number of times, each launch running
  // a host function again (its second run would free the holder twice): captured work holds what it touches for
  // the process's life.
  const auto capturing = stream_capturing(s, device);
  if ((capturing && *capturing) || !launch_host_function(s, device, let_go, held)) {
    static std::mutex lock;  // kept for good: the kernel may still run
    static std::vector<std::shared_ptr<const void>*> kept;
    const std::lock_guard<std::mutex> hold(lock);
    try {
      kept.push_back(held);
    } catch (...) {  // no memory to list it: it stays allocated all the same
    }
  }
}

/// The kernel in `context`, loaded by `load()` (a result<Function>) the first time that context asks. Global state,
/// one cache per backend library (each instantiates this once): a module lives as long as its context, so it is
/// loaded once per context (loading JITs the PTX) and never unloaded.
template <class Context, class Function, class Load>
result<Function> signal_kernel_in(Context context, Load&& load) {
  static std::mutex lock;
  static std::vector<std::pair<Context, Function>> loaded;
  const std::lock_guard<std::mutex> hold(lock);
  for (const auto& [c, f] : loaded)
    if (c == context) return f;
  PVMM_TRY_ASSIGN(f, load());
  loaded.emplace_back(context, f);
  return f;
}

/// Where a backend launches the driver path's releases (team_signal.hpp, enqueue_release): a context of its own on
/// the device, a stream in it and the signal kernel loaded there.
template <class Context, class Stream, class Function>
struct release_lane {
  Context context{};
  Stream stream{};
  Function kernel{};
};

/// Device `ordinal`'s lane, made by `make()` (a result<Lane>) the first time it is asked for, then kept for the
/// process's life (one per backend library and device; a context costs device memory, so only a process that
/// uses the driver path pays for one).
template <class Lane, class Make>
result<Lane> release_lane_of(int ordinal, Make&& make) {
  struct lanes {
    std::mutex lock;
    std::vector<std::pair<int, Lane>> made;
  };
  static auto* all = new (std::nothrow) lanes;  // never destroyed: a watchdog may release while the process exits
  if (all == nullptr) return make_error(errc::out_of_memory, "no memory for the release lanes");
  const std::lock_guard<std::mutex> hold(all->lock);
  for (const auto& [device, lane] : all->made)
    if (device == ordinal) return lane;
  try {
    all->made.reserve(all->made.size() + 1);  // before the context is made: listing it cannot fail after
  } catch (...) {
    return make_error(errc::out_of_memory, "no memory for the release lanes");
  }
  PVMM_TRY_ASSIGN(lane, make());
  all->made.emplace_back(ordinal, lane);
  return lane;
}

}  // namespace pvmm::detail::backend
