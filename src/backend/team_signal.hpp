// Backend feature "team_signal": the stream-ordered signal, wait and barrier of a window's signal pads
// (pvmm/team_device.hpp). The neutral layer validates and builds the view; a backend enqueues one of the header's
// functions on the stream: the host backend as a host function, cuda as a one-thread kernel of its signal module.
#pragma once

#include <cstdint>
#include <memory>

#include <pvmm/stream.hpp>
#include <pvmm/team_device.hpp>

#include "backend/device.hpp"

namespace pvmm::detail::backend {

using pvmm::detail::signal_op;  // team_device.hpp: the one dispatch (run_signal_op) kernels and hosts share

/// What one enqueued signal operation needs (copied: the call returns before it runs).
struct signal_work {
  window_view view;
  signal_op op = signal_op::put;
  std::int32_t peer = 0;  ///< put: the rank signalled; wait: the rank waited for; barrier: unused
  std::int32_t channel = 0;
  std::uint64_t timeout_ns = 0;
  std::uint64_t value = 0;       ///< release: the target the stream counter is raised to
  std::uint32_t aborted_by = 0;  ///< release: what ended the wait (signal_error::aborted_by; 0: its deadline)
  /// What the view points into (the window's pads and owner-only block), held until the work has run: a window
  /// released, or a team aborted, while the work is queued leaves its memory in place until then.
  std::shared_ptr<const void> keep;
};

/// Whether this backend enqueues signal work on a device's streams (empty: it does; else why not).
const char* stream_signals_missing(int ordinal) noexcept;
/// Whether a stream-ordered wait for a rank in this process on the same device is sure to progress (empty: it is;
/// else why not). The host backend's streams are threads, so it is; a GPU does not promise that the kernels of one
/// context run at the same time, so a wait for a rank sharing the context may stall until its timeout.
const char* same_context_waits_missing(int ordinal) noexcept;
/// Enqueues `work` on stream `s` of device `device`; `work.keep` is let go once the work has run.
status enqueue_signal(const signal_work& work, stream_handle s, int device);
/// Whether this backend has the driver's stream memory operations on a device (empty: it has; else why not):
/// window_options::stream_signals = driver.
const char* stream_memops_missing(int ordinal) noexcept;
/// Enqueues a 64-bit write of `value` to `at` (device-visible memory) on stream `s`, after the stream's earlier
/// work; `fenced`: after that work's writes too (the driver's default flag, a memory fence first), which a signal
/// needs and a ticket saying only where the stream is does not.
status enqueue_stream_write(std::uint64_t* at, std::uint64_t value, stream_handle s, int device, bool fenced = true);
/// Enqueues a wait, on stream `s`, until the 64-bit word at `at` is at least `value` (wrap-safe: the driver's GEQ
/// compares the difference's sign). It has no deadline of its own: the driver path's watchdog releases it.
status enqueue_stream_wait(const std::uint64_t* at, std::uint64_t value, stream_handle s, int device);
/// Enqueues `work` (a release: signal_op::release) where no stream of the caller's can hold it up. A driver stream
/// wait blocks the hardware queue its stream was given, which other streams of the same context may share
/// (CUDA_DEVICE_MAX_CONNECTIONS: 8 by default), so a release on another stream of that context can sit behind the
/// very wait it is meant to end. The GPU backends launch it in a context of their own on the device (made once per
/// device per process, kept for its life); the host backend runs it at once on the calling thread.
status enqueue_release(const signal_work& work, int device);
/// Makes what enqueue_release needs on `device` now (the GPU backends' context, its stream and the kernel JIT'd in
/// it: up to seconds), so that no release pays for it: called when a driver-path window is made.
status prepare_releases(int device);
/// Waits until every release enqueued on `device` has run (what they touch may go after).
status finish_releases(int device);
/// AMD's wall clock rate (kHz) for the view; 0 where the device clock is in nanoseconds.
std::uint32_t wall_clock_khz(int ordinal) noexcept;

}  // namespace pvmm::detail::backend
