// Host backend, feature "stream": worker-thread streams, events as (stream, sequence) pairs, host functions,
// and copies in stream order.
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "backend/stream.hpp"
#include "worker_stream.hpp"

namespace pvmm::detail::backend {
namespace host {

worker_stream::worker_stream() : worker_([this] { run(); }) {}

worker_stream::~worker_stream() {
  {
    std::lock_guard<std::mutex> guard(lock_);
    stopping_ = true;
  }
  changed_.notify_all();
  // Never the worker's own thread: work items hold references to other streams only (a wait never names its
  // own stream), so the last reference to a stream goes on another thread.
  if (worker_.joinable()) worker_.join();
}

std::uint64_t worker_stream::enqueue(std::function<void()> work) {
  std::lock_guard<std::mutex> guard(lock_);
  queue_.push_back(std::move(work));
  changed_.notify_all();
  return ++enqueued_;
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
  std::map<const worker_stream*, std::uint64_t> inherited;
  {
    std::lock_guard<std::mutex> guard(on->lock_);
    inherited = on->known_;  // what `on` was ordered after, it passes on (an approximation from above is safe)
  }
  enqueue([on, sequence] { on->wait_until_completed(sequence); });
  std::lock_guard<std::mutex> guard(lock_);
  auto& after = known_[on.get()];
  after = std::max(after, sequence);
  for (auto [stream, seq] : inherited) {
    auto& known = known_[stream];
    known = std::max(known, seq);
  }
}

std::uint64_t worker_stream::ordered_after(const worker_stream* other) const {
  std::lock_guard<std::mutex> guard(lock_);
  auto it = known_.find(other);
  return it == known_.end() ? 0 : it->second;
}

void worker_stream::run() {
  for (;;) {
    std::function<void()> work;
    {
      std::unique_lock<std::mutex> guard(lock_);
      changed_.wait(guard, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and drained
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

template <class T>
std::uint64_t handle_of(const std::shared_ptr<T>& p) {
  return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p.get()));
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
  auto s = std::make_shared<worker_stream>();
  std::lock_guard<std::mutex> guard(registry_lock);
  streams.emplace(handle_of(s), s);
  return stream_handle{handle_of(s)};
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
  return {};  // the worker stops when its last user (a pending wait, an event) lets go
}

status synchronize_stream(stream_handle h, int) {
  auto s = find_stream(h);
  if (!s) return unknown_stream(h);
  const auto through = s->enqueued();
  s->wait_until_completed(through);
  s->observe(through);
  release_above_thresholds();
  return {};
}

result<bool> query_stream(stream_handle h, int) {
  auto s = find_stream(h);
  if (!s) return unknown_stream(h);
  const auto through = s->enqueued();
  if (s->completed() < through) return false;
  s->observe(through);
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

status launch_host_function(stream_handle h, int, void (*fn)(void*), void* data) {
  auto s = find_stream(h);
  if (!s) return unknown_stream(h);
  s->enqueue([fn, data] { fn(data); });
  return {};
}

status copy_async(void* destination, const void* source, std::size_t size, stream_handle h, int, bool stage_source) {
  auto s = find_stream(h);
  if (!s) return unknown_stream(h);
  if (stage_source && !is_pool_memory(source)) {  // pageable: read now, so the caller may reuse the source at once
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
  events.emplace(handle_of(e), e);
  return event_handle{handle_of(e)};
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
    on->observe(sequence);
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
  on->observe(sequence);
  return true;
}

}  // namespace pvmm::detail::backend
