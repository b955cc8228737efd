// The stream-ordered signal calls of a window (pvmm/team_device.hpp): put_signal, wait_signal and barrier checked
// and handed to the backend (src/backend/team_signal.hpp: the team layer's one door into the backend, named in
// docs/design.md), and the host's view of the owner-only block (view, device_pointer_table, signal_status).
#include <vector>

#include <pvmm/stream.hpp>
#include <pvmm/team.hpp>

#include <fmt/format.h>

#include "backend/team_signal.hpp"
#include "core/deferred_release.hpp"
#include "team/bootstrap_common.hpp"
#include "team/no_throw.hpp"
#include "team/window_state.hpp"

namespace pvmm {
namespace {
result<const detail::window_signals*> signals_of(const std::shared_ptr<detail::window_state>& s,
                                                 const detail::operation& op) {
  if (!s) return op.fail(errc::already_released, "this window is empty (released or moved from)");
  if (!s->signals)
    return op.fail(errc::invalid_argument, "this window has no signal pads",
                   "create it (or create_from it) with window_options::signal_channels > 0");
  return s->signals.get();
}

window_view make_view(const detail::window_state& w, const detail::window_signals& s) {
  window_view v;
  v.base = static_cast<char*>(w.range.address());
  v.stride = w.stride;
  v.own = s.own();
  v.peers = reinterpret_cast<void* const*>(reinterpret_cast<char*>(s.own()) +
                                           window_view::table_offset(s.channels, static_cast<int>(w.slots.size())));
  v.pad_base = static_cast<char*>(s.pads.base());
  v.pad_stride = s.pads.stride();
  v.rank = w.team->rank();
  v.size = static_cast<int>(w.slots.size());
  v.channels = s.channels;
  v.wall_clock_khz = s.wall_clock_khz;
  v.abort_word = s.abort_on_device;
  return v;
}

std::uint64_t timeout_ns(std::chrono::milliseconds t) {
  constexpr auto most = std::chrono::hours(24 * 365);  // far beyond any wait; keeps the nanoseconds in range
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::min<std::chrono::milliseconds>(t, most)).count());
}

// The checks every stream-ordered call makes before anything is enqueued, then the backend's enqueue.
status enqueue(const std::shared_ptr<detail::window_state>& state, detail::backend::signal_op what, int peer,
               int channel, stream_ref on, std::chrono::milliseconds timeout, const detail::operation& op) {
  PVMM_TRY_ASSIGN(s, signals_of(state, op));
  // The capability first (this rank's device: a stream on another device is refused below).
  if (const char* missing = detail::backend::stream_signals_missing(state->team->options.device))
    return op.fail(errc::not_supported, missing);
  if (what != detail::backend::signal_op::put && s->same_context_ranks[0] >= 0) {
    if (const char* why = detail::backend::same_context_waits_missing(state->team->options.device))
      return op.fail(errc::not_supported,
                     fmt::format("ranks {} and {} of this window are in one process on one device: {}",
                                 s->same_context_ranks[0], s->same_context_ranks[1], why),
                     "run one process per rank (processes sharing a GPU are time-sliced, so each one's kernels run) "
                     "or give each thread rank its own GPU");
  }
  const int n = static_cast<int>(state->slots.size());
  if (what != detail::backend::signal_op::barrier && (peer < 0 || peer >= n || peer == state->team->rank()))
    return op.fail(errc::invalid_argument,
                   fmt::format("peer {} is not another rank of this window of {} ranks", peer, n));
  if (channel < 0 || channel >= s->channels)
    return op.fail(errc::invalid_argument, fmt::format("channel {} is outside 0..{}", channel, s->channels - 1));
  PVMM_TRY(detail::check_timeout(timeout, "timeout", op));
  if (on.native_handle().value == 0) return op.fail(errc::invalid_argument, "the stream is empty");
  if (on.device() != state->team->options.device)
    return op.fail(errc::invalid_device, fmt::format("the stream is on device {}; the team's device is {}", on.device(),
                                                     state->team->options.device));
  // After team::abort() nothing new is enqueued (work already queued runs on the pads, which abort leaves mapped).
  PVMM_TRY(detail::check_aborted(*state->team, op));
  // A peer whose pad is not mapped here (unreachable) cannot be signalled: the write would fault.
  if (what != detail::backend::signal_op::wait) {
    for (int r = 0; r < n; ++r) {
      if (r == state->team->rank() || (what == detail::backend::signal_op::put && r != peer)) continue;
      if (!s->pads.mapped(r))
        return op.fail(errc::peer_lost,
                       fmt::format("rank {}'s signal pad is not mapped here: {}", r, s->pads.unmapped_reason(r)));
    }
  }
  detail::release_deferred();  // what earlier work held once it ran (core/deferred_release.hpp), on this thread
  if (s->driver)               // the driver path (team/stream_waits.hpp)
    return s->driver->enqueue(make_view(*state, *s), what, peer, channel, on, timeout, state, op);
  detail::backend::signal_work work;
  work.view = make_view(*state, *s);
  work.op = what;
  work.peer = peer;
  work.channel = channel;
  work.timeout_ns = timeout_ns(timeout);
  work.keep = state;  // the pads and the owner-only block stay until the work has run (window released or not)
  return op.step("enqueue", [&] { return detail::backend::enqueue_signal(work, on.native_handle(), on.device()); });
}
// Reads this rank's error record (owner-only memory: no peer can write it), and with `clear` zeroes it after.
status read_signal_status(const std::shared_ptr<detail::window_state>& state, bool clear, const char* name) {
  const std::string full = std::string("pvmm::symmetric_window::") + name;
  const auto args = [] { return std::string(); };
  const detail::operation op{full.c_str(), args};
  PVMM_TRY_ASSIGN(s, signals_of(state, op));
  const window_view v = make_view(*state, *s);
  signal_error record;
  PVMM_TRY_ASSIGN(st, op.step("stream::create", [&] { return stream::create(state->team->options.device); }));
  PVMM_TRY(op.step("stream_ref::copy_async", [&] { return st.copy_async(&record, v.error(), sizeof record); }));
  if (clear) {
    const signal_error zero;
    PVMM_TRY(op.step("stream_ref::copy_async", [&] { return st.copy_async(v.error(), &zero, sizeof zero); }));
    PVMM_TRY(op.step("stream_ref::synchronize", [&] { return st.synchronize(); }));
  } else {
    PVMM_TRY(op.step("stream_ref::synchronize", [&] { return st.synchronize(); }));
  }
  if (record.failed == 0) return {};
  if (record.aborted_by != 0) {
    const bool exited = (record.aborted_by & signal_error::exited_bit) != 0;
    const std::uint32_t lost = (record.aborted_by & ~signal_error::exited_bit) - 1;
    return op.fail(
        errc::peer_lost,
        fmt::format("rank {}'s wait for rank {} on channel {} ended: rank {} {} (signals seen {}, needed {})", v.rank,
                    record.rank, record.channel, lost, exited ? "exited (its process is gone)" : "aborted", record.seen,
                    record.expected),
        exited ? "a peer process died while a device wait ran; the context stays usable"
               : "the team was aborted (team::abort) while a device wait ran; the context stays usable");
  }
  return op.fail(errc::timeout,
                 fmt::format("rank {} waited for rank {} on channel {} and timed out (signals seen {}, needed {})",
                             v.rank, record.rank, record.channel, record.seen, record.expected),
                 "the peer never signalled (it died, stalled, or its signals and this rank's waits do not match)");
}
}  // namespace

result<window_view> symmetric_window::view() const {
  const auto args = [] { return std::string(); };
  const detail::operation op{"pvmm::symmetric_window::view", args};
  PVMM_TRY_ASSIGN(s, signals_of(state_, op));
  return make_view(*state_, *s);
}

result<void* const*> symmetric_window::device_pointer_table() const {
  const auto args = [] { return std::string(); };
  const detail::operation op{"pvmm::symmetric_window::device_pointer_table", args};
  PVMM_TRY_ASSIGN(s, signals_of(state_, op));
  return make_view(*state_, *s).peers;
}

status symmetric_window::put_signal(int peer, int channel, stream_ref on) const {
  return detail::no_throw<status>("pvmm::symmetric_window::put_signal", [&]() -> status {
    const auto args = [&] { return fmt::format("peer={}, channel={}", peer, channel); };
    const detail::operation op{"pvmm::symmetric_window::put_signal", args};
    return enqueue(state_, detail::backend::signal_op::put, peer, channel, on, std::chrono::milliseconds(0), op);
  });
}

status symmetric_window::wait_signal(int peer, int channel, stream_ref on, std::chrono::milliseconds timeout) const {
  return detail::no_throw<status>("pvmm::symmetric_window::wait_signal", [&]() -> status {
    const auto args = [&] { return fmt::format("peer={}, channel={}, timeout={}ms", peer, channel, timeout.count()); };
    const detail::operation op{"pvmm::symmetric_window::wait_signal", args};
    return enqueue(state_, detail::backend::signal_op::wait, peer, channel, on, timeout, op);
  });
}

status symmetric_window::barrier(int channel, stream_ref on, std::chrono::milliseconds timeout) const {
  return detail::no_throw<status>("pvmm::symmetric_window::barrier", [&]() -> status {
    const auto args = [&] { return fmt::format("channel={}, timeout={}ms", channel, timeout.count()); };
    const detail::operation op{"pvmm::symmetric_window::barrier", args};
    return enqueue(state_, detail::backend::signal_op::barrier, -1, channel, on, timeout, op);
  });
}

status symmetric_window::signal_status() const {
  return detail::no_throw<status>("pvmm::symmetric_window::signal_status",
                                  [&]() -> status { return read_signal_status(state_, false, "signal_status"); });
}

status symmetric_window::clear_signal_status() const {
  return detail::no_throw<status>("pvmm::symmetric_window::clear_signal_status",
                                  [&]() -> status { return read_signal_status(state_, true, "clear_signal_status"); });
}

}  // namespace pvmm
