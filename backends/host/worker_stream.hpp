// The host backend's streams: each a worker thread running its work in order, with counters that make ordering
// observable. Events are (stream, sequence number) pairs, so waits carry real ordering and the pool's reuse
// policies can be told apart (an inline, synchronous stand-in would make every free complete at once).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include <pvmm/stream.hpp>

#include "backend/error_helpers.hpp"

namespace pvmm::detail::backend::host {

class worker_stream : public std::enable_shared_from_this<worker_stream> {
 public:
  /// A stream with its worker running, or errc::system_error naming the errno and the limits to look at when
  /// the process may not start another thread (std::thread would throw: pvmm never does).
  static result<std::shared_ptr<worker_stream>> start();
  worker_stream() = default;  // no worker yet: start() makes streams
  ~worker_stream();           // as stop()
  worker_stream(const worker_stream&) = delete;
  worker_stream& operator=(const worker_stream&) = delete;

  /// Enqueues `work`; returns its sequence number (1, 2, ...): it has run once completed() >= that number.
  std::uint64_t enqueue(std::function<void()> work);
  std::uint64_t enqueued() const;
  std::uint64_t completed() const;
  void wait_until_completed(std::uint64_t sequence) const;
  /// The host has seen work up to `sequence` complete: by a blocking synchronisation (`blocking`: a stream or event
  /// synchronize), or by a query that answered done. Either lets a pool allocation be exported (observed()); only
  /// a blocking one makes the stream's completed frees reusable on every stream (synchronized()), as the drivers
  /// do (tools/probes/README.md, pool_reuse: a polled query changed no cell).
  void observe(std::uint64_t sequence, bool blocking) {
    raise(observed_, sequence);
    if (blocking) raise(synchronized_, sequence);
  }
  std::uint64_t observed() const { return observed_.load(); }
  std::uint64_t synchronized() const { return synchronized_.load(); }
  /// Work enqueued from now on waits until `on` has completed `sequence`; the ordering is recorded.
  void enqueue_wait(const std::shared_ptr<worker_stream>& on, std::uint64_t sequence);
  /// How far this stream's later work is ordered after `other`'s (sequence numbers), by waits enqueued so far.
  std::uint64_t ordered_after(const worker_stream* other) const;
  /// Runs the queued work, then joins the worker: a released stream gives its thread back at once. What still
  /// refers to it (an event recorded on it, a pool block freed on it, a wait on another stream) reads only its
  /// counters, which need no thread; work enqueued after this runs inline on the caller's thread.
  void stop();

 private:
  void run();
  mutable std::mutex lock_;
  mutable std::condition_variable changed_;
  std::deque<std::function<void()>> queue_;
  std::uint64_t enqueued_ = 0, completed_ = 0;
  // Enqueue-time ordering after other streams, keyed by serial: an address can be reused by a later stream, which
  // must not inherit what was known of the stream before it.
  std::map<std::uint64_t, std::uint64_t> known_;
  const std::uint64_t serial_ = next_serial();
  static std::uint64_t next_serial() {
    static std::atomic<std::uint64_t> counter{0};  // process-wide: serials must never repeat within the process
    return ++counter;
  }
  bool stopping_ = false, stopped_ = false;  // stopped_: the worker has exited; enqueue runs work inline
  std::mutex inline_lock_;                   // inline work runs one at a time, in sequence order
  std::atomic<std::uint64_t> observed_{0}, synchronized_{0};
  static void raise(std::atomic<std::uint64_t>& to, std::uint64_t sequence) {
    for (auto seen = to.load(); seen < sequence && !to.compare_exchange_weak(seen, sequence);) {
    }
  }
  std::thread worker_;
};

/// A recorded point: the stream and its sequence number at record time (no stream: never recorded).
struct worker_event {
  std::mutex lock;
  std::shared_ptr<worker_stream> stream;
  std::uint64_t sequence = 0;
  /// What was recorded, read under the lock.
  std::pair<std::shared_ptr<worker_stream>, std::uint64_t> recorded() {
    std::lock_guard<std::mutex> guard(lock);
    return {stream, sequence};
  }
};

/// The live streams and events by handle. Process-wide because handles are: a handle the caller passes is
/// looked up here, so a stale or foreign one is refused instead of dereferenced.
std::shared_ptr<worker_stream> find_stream(stream_handle h);
std::shared_ptr<worker_event> find_event(event_handle h);
/// errc::invalid_handle for a handle find_stream does not know.
error unknown_stream(stream_handle h);

/// Pools (pool.cpp): the release threshold applied at a synchronize, as the drivers apply it.
void release_above_thresholds();

}  // namespace pvmm::detail::backend::host
