// team/stream_waits.hpp: the driver path's counts, its ticket words, and the watchdog that keeps every wait's
// deadline.
#include "team/stream_waits.hpp"

#include <algorithm>
#include <exception>
#include <new>

#include <fmt/format.h>

#include "backend/stream.hpp"
#include "backend/team_signal.hpp"

namespace pvmm::detail {
namespace {
// Ticket words per window: a put takes one, a wait or barrier two, until its stream has passed it. 8192 words hold
// thousands of operations in flight (more than a stream's launch queue holds), in 64 KiB of page-locked memory.
constexpr std::uint32_t ticket_words = 8192;
// How often the watchdog looks for waits the streams have reached, and repeats a release the stream has not passed.
constexpr std::chrono::milliseconds look_every{10};
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
    w->free_words_.reserve(ticket_words);
    for (std::uint32_t i = ticket_words; i-- > 0;) w->free_words_.push_back(i);
    w->pending_.reserve(64);
  } catch (const std::bad_alloc&) {
    return op.fail(errc::out_of_memory, "no memory for the driver path's counts");
  }
  PVMM_TRY(op.step("prepare the releases", [&] { return backend::prepare_releases(device); }));
  pinned_options o;
  o.mapped = true;
  PVMM_TRY_ASSIGN(memory, op.step("pinned_allocation::create (ticket words)",
                                  [&] { return pinned_allocation::create(ticket_words * sizeof(std::uint64_t), o); }));
  PVMM_TRY_ASSIGN(on_device, op.step("pinned_allocation::device_pointer (ticket words)",
                                     [&] { return memory.device_pointer(device); }));
  for (std::uint32_t i = 0; i < ticket_words; ++i)
    __atomic_store_n(static_cast<std::uint64_t*>(memory.data()) + i, std::uint64_t{0}, __ATOMIC_RELEASE);
  w->words_memory_ = std::move(memory);
  w->words_on_device_ = static_cast<std::uint64_t*>(on_device);
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

bool stream_waits::seen(std::uint32_t word, std::uint64_t ticket) const noexcept {
  return __atomic_load_n(static_cast<const std::uint64_t*>(words_memory_.data()) + word, __ATOMIC_ACQUIRE) == ticket;
}

status stream_waits::start_watchdog(const operation& op) {
  if (started_) return {};
  try {
    watchdog_ = std::thread([this] { watch(); });
  } catch (const std::exception& e) {
    return op.fail(errc::out_of_memory, fmt::format("the watchdog thread could not start: {}", e.what()));
  }
  started_ = true;
  return {};
}

status stream_waits::enqueue(const window_view& view, signal_op what, int peer, int channel, stream_ref s,
                             std::chrono::milliseconds timeout, std::shared_ptr<const void> keep, const operation& op) {
  PVMM_TRY(op.step("stream_capturing", [&]() -> status {
    PVMM_TRY_ASSIGN(capturing, backend::stream_capturing(s.native_handle(), device_));
    if (capturing)
      return op.fail(errc::not_supported, "the stream is capturing a graph",
                     "the driver path's counts are fixed when enqueued, so a replay would wait for counts already "
                     "met: capture with window_options::stream_signals = kernel");
    return {};
  }));
  const bool waits = what == signal_op::wait || (what == signal_op::barrier && ranks_ > 1);
  entry e;
  e.channel = channel;
  e.timeout = std::min<std::chrono::milliseconds>(timeout, std::chrono::hours(24 * 365));  // keeps time in range
  e.keep = std::move(keep);
  try {
    if (waits) e.targets.reserve(what == signal_op::barrier ? static_cast<std::size_t>(ranks_) : 1);
  } catch (const std::bad_alloc&) {
    return op.fail(errc::out_of_memory, "no memory for the wait's targets");
  }
  const std::lock_guard<std::mutex> serial(enqueue_lock_);
  {
    const std::lock_guard<std::mutex> hold(lock_);
    retire_locked();
    PVMM_TRY(start_watchdog(op));
    try {
      pending_.reserve(pending_.size() + 1);  // nothing after the driver calls allocates
    } catch (const std::bad_alloc&) {
      return op.fail(errc::out_of_memory, "no memory for the pending list");
    }
    if (free_words_.size() < (waits ? 2u : 1u))
      return op.fail(errc::busy,
                     fmt::format("{} operations of this window's driver path are in flight", pending_.size()),
                     "synchronise the streams that signal on it first");
    e.passed = free_words_.back();
    free_words_.pop_back();
    if (waits) {
      e.reached = free_words_.back();
      free_words_.pop_back();
    }
    e.ticket = ++tickets_;
    view_ = view;
  }
  // The driver calls on the caller's stream, without lock_; each operation counted once enqueued, so a failure part
  // way leaves the counts matching what the stream holds.
  const int me = view.rank;
  const stream_handle on = s.native_handle();
  bool enqueued = false;
  const auto put = [&](int to) -> status {
    PVMM_TRY(op.step("stream write (put_signal)", [&] {
      return backend::enqueue_stream_write(view.stream_inbox(to, channel, me), sent(channel, to) + 1, on, device_);
    }));
    ++sent(channel, to);
    enqueued = true;
    return {};
  };
  const auto wait = [&](int from) -> status {
    PVMM_TRY(op.step("stream wait (wait_signal)", [&] {
      return backend::enqueue_stream_wait(view.stream_inbox(me, channel, from), expected(channel, from) + 1, on,
                                          device_);
    }));
    e.targets.push_back({from, ++expected(channel, from), false, 0});  // reserved: cannot throw
    enqueued = true;
    return {};
  };
  status done;
  bool reached_written = false;
  // Building a failure's text may throw (no memory) after part of the call is on the stream: what was enqueued is
  // recorded all the same (the entry holds the window), then the exception goes on to the caller's no_throw.
  std::exception_ptr thrown;
  try {
    if (what == signal_op::put) done = put(peer);
    for (int r = 0; what == signal_op::barrier && r < ranks_ && done; ++r)
      if (r != me) done = put(r);
    // The deadline runs from when the stream reaches the waits (the kernel path's starts when its kernel does).
    // Tickets say where the stream is, so they need no fence; a passed ticket behind puts does (the puts' writes
    // land before the window may go).
    reached_written =
        waits && done && backend::enqueue_stream_write(words_on_device_ + e.reached, e.ticket, on, device_, false);
    enqueued = enqueued || reached_written;
    if (what == signal_op::wait && done) done = wait(peer);
    for (int r = 0; what == signal_op::barrier && r < ranks_ && done; ++r)
      if (r != me) done = wait(r);
    // The passed ticket also for a call that enqueued nothing else (a barrier of one rank): the call's work is on
    // the stream either way, and the entry is how the caller's window is held until then.
    e.observable = (enqueued || done) && backend::enqueue_stream_write(words_on_device_ + e.passed, e.ticket, on,
                                                                       device_, what != signal_op::wait);
    enqueued = enqueued || e.observable;
  } catch (...) {
    thrown = std::current_exception();
    e.observable = false;  // its passed ticket was not enqueued: held for good below
  }
  const auto record = [&]() -> status {
    const std::lock_guard<std::mutex> hold(lock_);
    const auto now = clock::now();
    if (!enqueued) {  // nothing of it is on the stream
      free_words_.push_back(e.passed);
      if (e.reached != no_word) free_words_.push_back(e.reached);
      return done;
    }
    if (!reached_written && e.reached != no_word) {  // never written: free again; the deadline runs from now
      free_words_.push_back(e.reached);
      e.reached = no_word;
    }
    e.armed = e.reached == no_word;
    if (e.armed) e.deadline = now + e.timeout;
    if (!e.observable && e.keep) {
      // Nothing will say when the stream has passed it: the window is held for the process's life (as captured
      // kernel-path work is; the holder is never deleted), and the entry goes once its waits are released. No memory
      // for the holder: the reference stays in the entry, which then stays for good.
      (void)new (std::nothrow) std::shared_ptr<const void>(std::move(e.keep));
    }
    pending_.push_back(std::move(e));  // reserved above: cannot throw
    // The watchdog looks again when this entry needs it sooner than it planned: its deadline, or the look for its
    // stream reaching it, or at once where a peer it waits for has already exited.
    const entry& added = pending_.back();
    auto due = added.armed ? added.deadline : now + look_every;
    for (const target& t : added.targets)
      if (abort_words_ && (__atomic_load_n(abort_words_, __ATOMIC_ACQUIRE) != 0 ||
                           __atomic_load_n(abort_words_ + 1 + t.rank, __ATOMIC_ACQUIRE) != 0))
        due = now;
    if (!added.targets.empty() && due < planned_wake_) woken_.notify_all();
    return done;
  };
  const status recorded = record();
  if (thrown) std::rethrow_exception(thrown);
  return recorded;
}

void stream_waits::retire_locked() noexcept {
  auto kept = pending_.begin();
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    // An unobservable entry still holding the window never lets go of it (its stream may not have passed it).
    const bool passed = it->observable ? seen(it->passed, it->ticket)
                                       : !it->keep && std::all_of(it->targets.begin(), it->targets.end(),
                                                                  [](const target& t) { return t.released; });
    std::shared_ptr<const void>* held = nullptr;
    if (passed && it->keep) {
      // Let go of on a caller's thread (core/deferred_release.hpp): the window's teardown may call user code. No
      // memory for the holder: the entry stays, and is retired at a later look.
      held = new (std::nothrow) std::shared_ptr<const void>(std::move(it->keep));
      if (held == nullptr) {
        if (kept != it) *kept = std::move(*it);
        ++kept;
        continue;
      }
    }
    if (!passed) {
      if (kept != it) *kept = std::move(*it);
      ++kept;
      continue;
    }
    defer_release(held);
    if (it->observable) {  // its words are free again (a word whose write never ran is never reused)
      free_words_.push_back(it->passed);
      if (it->reached != no_word) free_words_.push_back(it->reached);
    }
  }
  pending_.erase(kept, pending_.end());
}

void stream_waits::release_locked(entry& e, int only_rank, std::uint32_t aborted_by, clock::time_point now) {
  bool marked = false;
  for (target& t : e.targets) {
    if (t.released || (only_rank >= 0 && t.rank != only_rank)) continue;
    t.released = true;
    t.aborted_by = aborted_by;
    marked = true;
  }
  if (marked) send_releases_locked(e, now);  // repeats are paced by the watchdog's look (look_every)
}

void stream_waits::send_releases_locked(entry& e, clock::time_point now) {
  // Every released target again (a slow peer's late, lower write may have lowered its counter since): the kernel
  // does nothing where the counter already holds the target.
  for (const target& t : e.targets) {
    if (!t.released) continue;
    backend::signal_work w;
    w.view = view_;
    w.op = signal_op::release;
    w.peer = t.rank;
    w.channel = e.channel;
    w.value = t.value;
    w.aborted_by = t.aborted_by;
    released_any_ = static_cast<bool>(backend::enqueue_release(w, device_)) || released_any_;
  }
  e.last_release = now;
}

stream_waits::clock::time_point stream_waits::look_locked(clock::time_point now) {
  retire_locked();
  const std::uint32_t team_aborted = abort_words_ ? __atomic_load_n(abort_words_, __ATOMIC_ACQUIRE) : 0;
  auto next = clock::time_point::max();
  for (entry& e : pending_) {
    if (e.targets.empty()) continue;  // a put: retired by whoever looks next
    if (!e.armed && e.reached != no_word && seen(e.reached, e.ticket)) {
      e.armed = true;
      e.deadline = now + e.timeout;
    }
    if (team_aborted != 0) {
      release_locked(e, -1, team_aborted, now);
    } else {
      for (const target& t : e.targets)
        if (!t.released && abort_words_ && __atomic_load_n(abort_words_ + 1 + t.rank, __ATOMIC_ACQUIRE) != 0)
          release_locked(e, t.rank, (static_cast<std::uint32_t>(t.rank) + 1) | signal_error::exited_bit, now);
      if (e.armed && now >= e.deadline) release_locked(e, -1, 0, now);
    }
    const bool released = std::any_of(e.targets.begin(), e.targets.end(), [](const target& t) { return t.released; });
    if (released && now - e.last_release >= look_every) send_releases_locked(e, now);
    const bool open = std::any_of(e.targets.begin(), e.targets.end(), [](const target& t) { return !t.released; });
    if (open) next = std::min(next, e.armed ? e.deadline : now + look_every);
    if (released) next = std::min(next, e.last_release + look_every);
  }
  return next;
}

void stream_waits::watch() noexcept {
  std::unique_lock<std::mutex> hold(lock_);
  while (!stop_) {
    auto next = clock::now() + look_every;  // where a look failed (no memory): again soon
    try {
      next = look_locked(clock::now());
    } catch (...) {
    }
    planned_wake_ = next;
    if (next == clock::time_point::max())
      woken_.wait(hold);
    else
      woken_.wait_until(hold, next);
    planned_wake_ = clock::now();
  }
}

}  // namespace pvmm::detail
