// team/stream_waits.hpp: the driver path's counts, its stream slots and tickets, and the watchdog that keeps every
// wait's deadline.
#include "team/stream_waits.hpp"

#include <algorithm>
#include <new>

#include <fmt/format.h>

#include "backend/stream.hpp"
#include "backend/team_signal.hpp"

namespace pvmm::detail {
namespace {
// Streams one window's driver-path work may be pending on at once (one page-locked ticket word each).
constexpr std::size_t stream_slots = 512;
}  // namespace

stream_waits::stream_waits(int device, int ranks, const std::uint32_t* abort_words) noexcept
    : device_(device), ranks_(ranks), abort_words_(abort_words) {}

result<std::unique_ptr<stream_waits>> stream_waits::create(int device, int channels, int ranks,
                                                           const std::uint32_t* abort_words, const operation& op) {
  std::unique_ptr<stream_waits> w(new (std::nothrow) stream_waits(device, ranks, abort_words));
  if (!w) return op.fail(errc::out_of_memory, "no memory for the driver path's state");
  const auto counts = static_cast<std::size_t>(channels) * static_cast<std::size_t>(ranks);
  try {
    w->sent_.assign(counts, 0);
    w->expected_.assign(counts, 0);
    w->slots_.assign(stream_slots, {});
    w->pending_.reserve(64);
  } catch (const std::bad_alloc&) {
    return op.fail(errc::out_of_memory, "no memory for the driver path's counts");
  }
  PVMM_TRY(op.step("prepare the releases", [&] { return backend::prepare_releases(device); }));
  pinned_options o;
  o.mapped = true;
  PVMM_TRY_ASSIGN(memory, op.step("pinned_allocation::create (stream tickets)",
                                  [&] { return pinned_allocation::create(stream_slots * sizeof(std::uint64_t), o); }));
  PVMM_TRY_ASSIGN(on_device, op.step("pinned_allocation::device_pointer (stream tickets)",
                                     [&] { return memory.device_pointer(device); }));
  for (std::size_t i = 0; i < stream_slots; ++i)
    __atomic_store_n(static_cast<std::uint64_t*>(memory.data()) + i, std::uint64_t{0}, __ATOMIC_RELEASE);
  w->done_memory_ = std::move(memory);
  w->done_on_device_ = static_cast<std::uint64_t*>(on_device);
  add_deferred_source(w.get());
  return w;
}

stream_waits::~stream_waits() {
  remove_deferred_source(this);
  {
    const std::lock_guard<std::mutex> hold(lock_);
    stop_ = true;
  }
  woken_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  // The releases it enqueued touch the pads and the error record, which go after this object.
  if (released_any_) (void)backend::finish_releases(device_);
}

void stream_waits::wake() noexcept {
  { const std::lock_guard<std::mutex> hold(lock_); }  // a watchdog between its look and its sleep sees the change
  woken_.notify_all();
}

void stream_waits::collect() noexcept {
  const std::lock_guard<std::mutex> hold(lock_);
  retire_locked();
}

result<std::size_t> stream_waits::slot_of(stream_ref s, const operation& op) {
  const std::uintptr_t handle = s.native_handle().value;
  std::size_t free = slots_.size();
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].pending != 0 && slots_[i].stream == handle) return i;
    if (slots_[i].pending == 0 && free == slots_.size()) free = i;
  }
  if (free == slots_.size())
    return op.fail(errc::busy,
                   fmt::format("{} streams have this window's driver-path signal work pending", slots_.size()),
                   "synchronise some of them first, or use fewer streams per window");
  slots_[free].stream = handle;
  return free;
}

status stream_waits::start_watchdog(const operation& op) {
  if (started_) return {};
  try {
    watchdog_ = std::thread([this] { watch(); });
  } catch (const std::system_error& e) {
    return op.fail(errc::out_of_memory, fmt::format("the watchdog thread could not start: {}", e.what()));
  }
  started_ = true;
  return {};
}

status stream_waits::enqueue(const window_view& view, signal_op what, int peer, int channel, stream_ref s,
                             std::chrono::milliseconds timeout, std::shared_ptr<const void> keep, const operation& op) {
  entry e;
  e.channel = channel;
  e.keep = std::move(keep);
  const bool waits = what != signal_op::put;
  if (waits) {
    const auto most = std::chrono::hours(24 * 365);  // far beyond any wait; keeps the time point in range
    e.deadline = clock::now() + std::min<std::chrono::milliseconds>(timeout, most);
    try {
      e.targets.reserve(what == signal_op::barrier ? static_cast<std::size_t>(ranks_) : 1);
    } catch (const std::bad_alloc&) {
      return op.fail(errc::out_of_memory, "no memory for the wait's targets");
    }
  }
  PVMM_TRY(op.step("stream_capturing", [&]() -> status {
    PVMM_TRY_ASSIGN(capturing, backend::stream_capturing(s.native_handle(), device_));
    if (capturing)
      return op.fail(errc::not_supported, "the stream is capturing a graph",
                     "the driver path's counts are fixed when enqueued, so a replay would wait for counts already "
                     "met: capture with window_options::stream_signals = kernel");
    return {};
  }));
  const std::lock_guard<std::mutex> hold(lock_);
  retire_locked();
  PVMM_TRY(start_watchdog(op));
  try {
    pending_.reserve(pending_.size() + 1);  // before anything is enqueued: nothing after it allocates
  } catch (const std::bad_alloc&) {
    return op.fail(errc::out_of_memory, "no memory for the pending list");
  }
  PVMM_TRY_ASSIGN(slot, slot_of(s, op));
  view_ = view;
  const int me = view.rank;
  // Each operation counted once enqueued: a failure part way leaves the counts matching what the stream holds.
  const auto put = [&](int to) -> status {
    PVMM_TRY(op.step("stream write (put_signal)", [&] {
      return backend::enqueue_stream_write(view.stream_inbox(to, channel, me), sent(channel, to) + 1, s.native_handle(),
                                           device_);
    }));
    ++sent(channel, to);
    return {};
  };
  const auto wait = [&](int from) -> status {
    PVMM_TRY(op.step("stream wait (wait_signal)", [&] {
      return backend::enqueue_stream_wait(view.stream_inbox(me, channel, from), expected(channel, from) + 1,
                                          s.native_handle(), device_);
    }));
    e.targets.push_back({from, ++expected(channel, from), false});
    return {};
  };
  status done;
  if (what == signal_op::put) {
    done = put(peer);
  } else if (what == signal_op::wait) {
    done = wait(peer);
  } else {
    for (int r = 0; r < ranks_ && done; ++r)
      if (r != me) done = put(r);
    for (int r = 0; r < ranks_ && done; ++r)
      if (r != me) done = wait(r);
  }
  if (!done && e.targets.empty() && what != signal_op::put) return done;  // nothing of it waits on the stream
  e.slot = slot;
  e.ticket = ++tickets_;
  e.observable =
      static_cast<bool>(backend::enqueue_stream_write(done_on_device_ + slot, e.ticket, s.native_handle(), device_));
  if (!e.observable && e.targets.empty()) e.deadline = clock::now();  // a put: nothing to release, let go soon
  // The watchdog sleeps until the earliest deadline: woken when this one is earlier, or when a peer it waits for
  // has already exited (its release is due now).
  bool wake_now =
      std::none_of(pending_.begin(), pending_.end(), [&](const entry& p) { return p.deadline <= e.deadline; });
  for (const target& t : e.targets)
    wake_now = wake_now || (abort_words_ && __atomic_load_n(abort_words_ + 1 + t.rank, __ATOMIC_ACQUIRE) != 0);
  ++slots_[slot].pending;
  pending_.push_back(std::move(e));  // reserved above: cannot throw
  if (wake_now) woken_.notify_all();
  return done;
}

void stream_waits::retire_locked() noexcept {
  const auto* done = static_cast<const std::uint64_t*>(done_memory_.data());
  const auto now = clock::now();
  auto kept = pending_.begin();
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    const bool passed = it->observable ? __atomic_load_n(done + it->slot, __ATOMIC_ACQUIRE) >= it->ticket
                                       : now >= it->deadline && it->targets.empty();
    if (!passed) {
      if (kept != it) *kept = std::move(*it);
      ++kept;
      continue;
    }
    --slots_[it->slot].pending;
    if (it->keep) {
      // Let go of on a caller's thread (core/deferred_release.hpp): the window's teardown may call user code.
      auto* held = new (std::nothrow) std::shared_ptr<const void>(std::move(it->keep));
      defer_release(held);  // no memory for the holder: the window stays (never torn down under this lock)
      if (held == nullptr) it->keep.reset();
    }
  }
  pending_.erase(kept, pending_.end());
}

void stream_waits::release_locked(entry& e, int only_rank, std::uint32_t aborted_by) noexcept {
  for (target& t : e.targets) {
    if (t.released || (only_rank >= 0 && t.rank != only_rank)) continue;
    backend::signal_work w;
    w.view = view_;
    w.op = signal_op::release;
    w.peer = t.rank;
    w.channel = e.channel;
    w.value = t.value;
    w.aborted_by = aborted_by;
    // A release that cannot be enqueued is tried again at the watchdog's next look (within 10 ms).
    t.released = static_cast<bool>(backend::enqueue_release(w, device_));
    released_any_ = released_any_ || t.released;
  }
  if (!e.observable && std::all_of(e.targets.begin(), e.targets.end(), [](const target& t) { return t.released; }))
    e.targets.clear();  // nothing says when the stream passes: retired now that it will
}

void stream_waits::watch() noexcept {
  std::unique_lock<std::mutex> hold(lock_);
  while (!stop_) {
    retire_locked();
    const auto now = clock::now();
    const std::uint32_t team_aborted = abort_words_ ? __atomic_load_n(abort_words_, __ATOMIC_ACQUIRE) : 0;
    auto next = clock::time_point::max();
    for (entry& e : pending_) {
      if (team_aborted != 0) release_locked(e, -1, team_aborted);
      for (const target& t : e.targets)
        if (!t.released && abort_words_ && __atomic_load_n(abort_words_ + 1 + t.rank, __ATOMIC_ACQUIRE) != 0)
          release_locked(e, t.rank, (static_cast<std::uint32_t>(t.rank) + 1) | signal_error::exited_bit);
      if (now >= e.deadline) release_locked(e, -1, 0);
      const bool open = std::any_of(e.targets.begin(), e.targets.end(), [](const target& t) { return !t.released; });
      // An open target past its deadline is one whose release could not be enqueued: tried again in 10 ms.
      if (open) next = std::min(next, e.deadline > now ? e.deadline : now + std::chrono::milliseconds(10));
      // A released entry, or one whose stream has not yet reported passing it, is looked at again soon.
      if (!open && e.observable) next = std::min(next, now + std::chrono::milliseconds(10));
    }
    if (next == clock::time_point::max())
      woken_.wait(hold);
    else
      woken_.wait_until(hold, next);
  }
}

}  // namespace pvmm::detail
