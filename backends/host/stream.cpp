// Host backend, feature "stream": worker-thread streams, events as (stream, sequence) pairs, host functions,
// and copies in stream order.
#include <cstring>
#include <mutex>
#include <system_error>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "backend/stream.hpp"
#include "worker_stream.hpp"

namespace pvmm::detail::backend {
namespace host {

result<std::shared_ptr<worker_stream>> worker_stream::start() {
  auto s = std::make_shared<worker_stream>();
  try {
    s->worker_ = std::thread([raw = s.get()] { raw->run(); });
  } catch (const std::system_error& e) {  // pthread_create's errno (EAGAIN: a thread or memory limit)
    error failed = errno_error(errc::system_error, "pthread_create", e.code().value(), "starting the stream's worker");
    failed.hint =
        "the process may not start another thread: RLIMIT_NPROC (ulimit -u, counted per user), the container's "
        "pids limit (pids.max of its cgroup) or RLIMIT_AS (ulimit -v; every thread maps a stack) is reached; "
        "raise it, or release streams no longer needed (each holds one thread)";
    return failed;
  }
  return s;
}

worker_stream::~worker_stream() { stop(); }

void worker_stream::stop() {
  std::thread worker;
  {
    std::lock_guard<std::mutex> guard(lock_);
    stopping_ = true;
    worker = std::move(worker_);
    if (!worker.joinable()) stopped_ = true;  // never started
  }
  changed_.notify_all();
  // Never the worker's own thread: work items hold references to other streams only (a wait never names its
  // own stream), so the last reference to a stream goes on another thread; destroy_stream is the user's call.
  if (worker.joinable()) worker.join();
}

std::uint64_t worker_stream::enqueue(std::function<void()> work) {
  std::unique_lock<std::mutex> guard(lock_);
  if (!stopped_) {
    queue_.push_back(std::move(work));
    changed_.notify_all();
    return ++enqueued_;
  }
  // No worker any more (a stream destroyed while another thread still used it): run it here, in order.
  guard.unlock();
  std::lock_guard<std::mutex> in_order(inline_lock_);
  guard.lock();
  const auto sequence = ++enqueued_;
  guard.unlock();
  work();
  work = nullptr;
  guard.lock();
  ++completed_;
  guard.unlock();
  changed_.notify_all();
  return sequence;
}

std::uint64_t worker_stream::enqueued() const {
  std::lock_guard<std::mutex> guard(lock_);
  return enqueued_;
}

std::uint64_t worker_stream::completed() const {
  std::lock_guard<std::mutex> guard(lock_);
  return completed_;
}

void worker_stream::wait_until_completed(std::uint64_t sequence) const {
  std::unique_lock<std::mutex> guard(lock_);
  changed_.wait(guard, [&] { return completed_ >= sequence; });
}

void worker_stream::enqueue_wait(const std::shared_ptr<worker_stream>& on, std::uint64_t sequence) {
  if (on.get() == this || sequence == 0) return;  // a stream is ordered after itself already
  std::map<std::uint64_t, std::uint64_t> inherited;
  {
    std::lock_guard<std::mutex> guard(on->lock_);
    inherited = on->known_;  // what `on` was ordered after, it passes on (an approximation from above is safe)
  }
  enqueue([on, sequence] { on->wait_until_completed(sequence); });
  std::lock_guard<std::mutex> guard(lock_);
  auto& after = known_[on->serial_];
  after = std::max(after, sequence);
  for (auto [stream, seq] : inherited) {
    auto& known = known_[stream];
    known = std::max(known, seq);
  }
}

std::uint64_t worker_stream::ordered_after(const worker_stream* other) const {
  std::lock_guard<std::mutex> guard(lock_);
  if (!other) return 0;
  auto it = known_.find(other->serial_);
  return it == known_.end() ? 0 : it->second;
}

void worker_stream::run() {
  for (;;) {
    std::function<void()> work;
    {
      std::unique_lock<std::mutex> guard(lock_);
      changed_.wait(guard, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) {  // stopping, and drained: later work runs inline (enqueue)
        stopped_ = true;
        return;
      }
      work = std::move(queue_.front());
      queue_.pop_front();
    }
    work();
    work = nullptr;  // what the work held (a pool, another stream) goes before it counts as completed
    {
      std::lock_guard<std::mutex> guard(lock_);
      ++completed_;
    }
    changed_.notify_all();
  }
}

namespace {
// The registries behind find_stream/find_event (see worker_stream.hpp for why they are process-wide).
std::mutex registry_lock;
std::unordered_map<std::uint64_t, std::shared_ptr<worker_stream>> streams;
std::unordered_map<std::uint64_t, std::shared_ptr<worker_event>> events;
// The last handle given out, under registry_lock. Handles are never reused (an address would be, by the next
// object allocated there): a stale handle finds nothing, and one counter for both kinds means a stream's handle
// is never an event's. They start far from the small integers a caller might make up.
std::uint64_t last_handle = std::uint64_t{0x7076} << 48;

/// Registers `object` under a new handle; the caller holds registry_lock.
template <class T>
std::uint64_t add(std::unordered_map<std::uint64_t, std::shared_ptr<T>>& registry, std::shared_ptr<T> object) {
  registry.emplace(++last_handle, std::move(object));
  return last_handle;
}
}  // namespace

std::shared_ptr<worker_stream> find_stream(stream_handle h) {
  std::lock_guard<std::mutex> guard(registry_lock);
  auto it = streams.find(h.value);
  return it == streams.end() ? nullptr : it->second;
}

std::shared_ptr<worker_event> find_event(event_handle h) {
  std::lock_guard<std::mutex> guard(registry_lock);
  auto it = events.find(h.value);
  return it == events.end() ? nullptr : it->second;
}

error unknown_stream(stream_handle h) {
  return make_error(errc::invalid_handle, fmt::format("{:#x} is not a live stream of the host backend", h.value),
                    "pass a stream made by pvmm::stream::create, while it lives");
}

}  // namespace host

using namespace host;

namespace {
error unknown_event(event_handle h) {
  return make_error(errc::invalid_handle, fmt::format("{:#x} is not a live event of the host backend", h.value));
}
}  // namespace

result<stream_handle> create_stream(int) {
  auto s = worker_stream::start();
  if (!s) return std::move(s).error();
  std::lock_guard<std::mutex> guard(registry_lock);
  return stream_handle{add(streams, std::move(*s))};
}

status destroy_stream(stream_handle h) {
  std::shared_ptr<worker_stream> s;
  {
    std::lock_guard<std::mutex> guard(registry_lock);
    auto it = streams.find(h.value);
    if (it == streams.end()) return unknown_stream(h);
    s = std::move(it->second);
    streams.erase(it);
  }
  s->stop();  // its thread goes now; events and waits on it keep only its counters
  return {};
}

status synchronize_stream(stream_handle h, int) {
  auto s = find_stream(h);
  if (!s) return unknown_stream(h);
  const auto through = s->enqueued();
  s->wait_until_completed(through);
  s->observe(through, true);
  release_above_thresholds();
  return {};
}

result<bool> query_stream(stream_handle h, int) {
  auto s = find_stream(h);
  if (!s) return unknown_stream(h);
  const auto through = s->enqueued();
  if (s->completed() < through) return false;
  s->observe(through, false);  // enough to export what it allocated; not to hand its frees to other streams
  return true;
}

status wait_event(stream_handle h, int, event_handle e) {
  auto s = find_stream(h);
  if (!s) return unknown_stream(h);
  auto ev = find_event(e);
  if (!ev) return unknown_event(e);
  auto [on, sequence] = ev->recorded();
  if (on) s->enqueue_wait(on, sequence);
  return {};
}

result<bool> stream_capturing(stream_handle, int) { return false; }  // host streams have no graphs

status launch_host_function(stream_handle h, int, void (*fn)(void*), void* data) {
  auto s = find_stream(h);
  if (!s) return unknown_stream(h);
  s->enqueue([fn, data] { fn(data); });
  return {};
}

status copy_async(void* destination, const void* source, std::size_t size, stream_handle h, int, source_read read) {
  auto s = find_stream(h);
  if (!s) return unknown_stream(h);
  if (read == source_read::stage) {  // pageable: read now, so the caller may reuse the source at once
    // As CUDA does for a pageable source, the stream's earlier work completes first: it may still be writing
    // the source (a copy into it enqueued before this one).
    s->wait_until_completed(s->enqueued());
    auto staged = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char*>(source),
                                                               static_cast<const unsigned char*>(source) + size);
    s->enqueue([destination, staged] { std::memcpy(destination, staged->data(), staged->size()); });
  } else {
    s->enqueue([destination, source, size] { std::memcpy(destination, source, size); });
  }
  return {};
}

result<event_handle> create_event(int) {
  auto e = std::make_shared<worker_event>();
  std::lock_guard<std::mutex> guard(registry_lock);
  return event_handle{add(events, std::move(e))};
}

status destroy_event(event_handle h) {
  std::lock_guard<std::mutex> guard(registry_lock);
  if (events.erase(h.value) == 0) return unknown_event(h);
  return {};
}

status record_event(event_handle e, stream_handle h, int) {
  auto s = find_stream(h);
  if (!s) return unknown_stream(h);
  auto ev = find_event(e);
  if (!ev) return unknown_event(e);
  std::lock_guard<std::mutex> guard(ev->lock);
  ev->stream = s;
  ev->sequence = s->enqueued();
  return {};
}

status synchronize_event(event_handle e) {
  auto ev = find_event(e);
  if (!ev) return unknown_event(e);
  auto [on, sequence] = ev->recorded();
  if (on) {
    on->wait_until_completed(sequence);
    on->observe(sequence, true);
  }
  release_above_thresholds();
  return {};
}

result<bool> query_event(event_handle e) {
  auto ev = find_event(e);
  if (!ev) return unknown_event(e);
  auto [on, sequence] = ev->recorded();
  if (!on) return true;
  if (on->completed() < sequence) return false;
  on->observe(sequence, false);
  return true;
}

}  // namespace pvmm::detail::backend
