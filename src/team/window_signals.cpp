// A window's signal pads (pvmm/team_device.hpp): made at create, zeroed before any rank can signal, and the
// stream-ordered put_signal / wait_signal / barrier, whose work a backend enqueues (src/backend/team_signal.hpp).
#include <cstring>
#include <vector>

#include <pvmm/stream.hpp>
#include <pvmm/team.hpp>

#include <fmt/format.h>

#include "backend/team_signal.hpp"
#include "team/no_throw.hpp"
#include "team/team_exchange.hpp"
#include "team/window_state.hpp"

namespace pvmm {
namespace detail {
namespace {

// Where this rank's pointer table sits in its pad: after the counters and the error record.
std::size_t table_offset(int channels, int ranks) {
  return static_cast<std::size_t>(window_view::pad_bytes(channels, ranks));
}

std::vector<void*> peer_pointers(window_state& w) {
  std::vector<void*> table(w.slots.size(), nullptr);
  for (std::size_t r = 0; r < w.slots.size(); ++r)
    if (w.slots[r].mapped) table[r] = static_cast<char*>(w.range.address()) + r * w.stride;
  return table;
}

// Copies `bytes` from host memory to `at` on the team's device and waits (the pad is device memory on GPUs).
status copy_to_pad(window_state& w, void* at, const void* bytes, std::size_t size, const operation& op) {
  PVMM_TRY_ASSIGN(s, op.step("stream::create", [&] { return stream::create(w.team->options.device); }));
  PVMM_TRY(op.step("stream_ref::copy_async", [&] { return s.copy_async(at, bytes, size); }));
  return op.step("stream_ref::synchronize", [&] { return s.synchronize(); });
}

}  // namespace

status attach_signals(const team& members, window_state& w, int channels, deadline until, const operation& op) {
  const int n = members.size();
  const std::size_t table = table_offset(channels, n);
  window_options pad_options;
  pad_options.size = table + sizeof(void*) * static_cast<std::size_t>(n);
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
  pad_options.timeout = std::max(left, std::chrono::milliseconds(0));
  PVMM_TRY_ASSIGN(pads,
                  op.step("create the signal pads", [&] { return symmetric_window::create(members, pad_options); }));
  // This rank's pad zeroed and its table written before the agreement: no peer signals before every pad is zero.
  std::optional<error> failed;
  try {
    std::vector<unsigned char> image(pad_options.size, 0);
    const auto pointers = peer_pointers(w);
    std::memcpy(image.data() + table, pointers.data(), pointers.size() * sizeof(void*));
    auto written = copy_to_pad(w, pads.local(), image.data(), image.size(), op);
    if (!written) failed = std::move(written).error();
  } catch (const std::bad_alloc&) {
    failed = op.fail(errc::out_of_memory, "no memory for the pad's image");
  }
  const std::uint64_t mine = static_cast<std::uint64_t>(channels);
  PVMM_TRY_ASSIGN(all,
                  all_gather(*w.team->ranks, w.team->next_step++, mine, failed, "agree zeroed signal pads", until, op));
  (void)all;  // the channels were agreed in the first step; this step is the agreement that every pad is zero
  auto s = std::make_unique<window_signals>();
  s->pads = std::move(pads);
  s->channels = channels;
  s->wall_clock_khz = backend::wall_clock_khz(w.team->options.device);
  // The first two ranks sharing a process and a device, from the records every rank holds: every rank refuses
  // the same waits (a rank that had no such sibling would otherwise wait for one that was refused).
  for (int a = 0; a < n && s->same_context_ranks[0] < 0; ++a)
    for (int b = a + 1; b < n && s->same_context_ranks[0] < 0; ++b)
      if (w.team->same_process(a, b) && w.team->same_device(a, b)) s->same_context_ranks = {a, b};
  w.signals = std::move(s);
  return {};
}

status refresh_pointer_table(window_state& w, const operation& op) {
  const auto pointers = peer_pointers(w);
  char* at = static_cast<char*>(w.signals->pads.local()) + table_offset(w.signals->channels, w.team->size());
  return copy_to_pad(w, at, pointers.data(), pointers.size() * sizeof(void*), op);
}

}  // namespace detail

namespace {
result<const detail::window_signals*> signals_of(const std::shared_ptr<detail::window_state>& s,
                                                 const detail::operation& op) {
  if (!s) return op.fail(errc::already_released, "this window is empty (released or moved from)");
  if (!s->signals)
    return op.fail(errc::invalid_argument, "this window has no signal pads",
                   "create it with window_options::signal_channels > 0");
  return s->signals.get();
}

window_view make_view(const detail::window_state& w, const detail::window_signals& s) {
  window_view v;
  v.base = static_cast<char*>(w.range.address());
  v.stride = w.stride;
  v.peers = reinterpret_cast<void* const*>(static_cast<char*>(s.pads.local()) +
                                           window_view::pad_bytes(s.channels, static_cast<int>(w.slots.size())));
  v.pad_base = static_cast<char*>(s.pads.base());
  v.pad_stride = s.pads.stride();
  v.rank = w.team->rank();
  v.size = static_cast<int>(w.slots.size());
  v.channels = s.channels;
  v.wall_clock_khz = s.wall_clock_khz;
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
  if (timeout.count() < 0) return op.fail(errc::invalid_argument, "the timeout is negative");
  if (on.native_handle().value == 0) return op.fail(errc::invalid_argument, "the stream is empty");
  if (on.device() != state->team->options.device)
    return op.fail(errc::invalid_device, fmt::format("the stream is on device {}; the team's device is {}", on.device(),
                                                     state->team->options.device));
  // A peer whose pad is not mapped here (unreachable, aborted) cannot be signalled: the write would fault.
  if (what != detail::backend::signal_op::wait) {
    for (int r = 0; r < n; ++r) {
      if (r == state->team->rank() || (what == detail::backend::signal_op::put && r != peer)) continue;
      if (!s->pads.mapped(r))
        return op.fail(errc::peer_lost,
                       fmt::format("rank {}'s signal pad is not mapped here: {}", r, s->pads.unmapped_reason(r)));
    }
  }
  detail::backend::signal_work work;
  work.view = make_view(*state, *s);
  work.op = what;
  work.peer = peer;
  work.channel = channel;
  work.timeout_ns = timeout_ns(timeout);
  return op.step("enqueue", [&] { return detail::backend::enqueue_signal(work, on.native_handle(), on.device()); });
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

status symmetric_window::barrier(stream_ref on, std::chrono::milliseconds timeout, int channel) const {
  return detail::no_throw<status>("pvmm::symmetric_window::barrier", [&]() -> status {
    const auto args = [&] { return fmt::format("channel={}, timeout={}ms", channel, timeout.count()); };
    const detail::operation op{"pvmm::symmetric_window::barrier", args};
    return enqueue(state_, detail::backend::signal_op::barrier, -1, channel, on, timeout, op);
  });
}

status symmetric_window::signal_status() const {
  return detail::no_throw<status>("pvmm::symmetric_window::signal_status", [&]() -> status {
    const auto args = [] { return std::string(); };
    const detail::operation op{"pvmm::symmetric_window::signal_status", args};
    PVMM_TRY_ASSIGN(s, signals_of(state_, op));
    const window_view v = make_view(*state_, *s);
    signal_error record;
    PVMM_TRY_ASSIGN(st, op.step("stream::create", [&] { return stream::create(state_->team->options.device); }));
    PVMM_TRY(op.step("stream_ref::copy_async", [&] { return st.copy_async(&record, v.error(), sizeof record); }));
    PVMM_TRY(op.step("stream_ref::synchronize", [&] { return st.synchronize(); }));
    if (record.failed == 0) return {};
    return op.fail(errc::timeout,
                   fmt::format("rank {} waited for rank {} on channel {} and timed out (signals seen {}, needed {})",
                               v.rank, record.rank, record.channel, record.seen, record.expected),
                   "the peer never signalled (it died, stalled, or its signals and this rank's waits do not match)");
  });
}

}  // namespace pvmm
