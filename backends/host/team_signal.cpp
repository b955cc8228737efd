// Host backend, feature "team_signal": the header's functions as host functions on the backend's streams (its
// streams run host functions in order on a worker thread, so a wait holds its stream as a kernel would), and the
// driver's stream memory operations reproduced the same way: a write is a release store, a wait spins (acquire
// loads, yielding its core) with no deadline of its own, as the driver's does.
#include <new>
#include <thread>
#include <utility>

#include "backend/stream.hpp"
#include "backend/team_signal.hpp"
#include "core/deferred_release.hpp"

namespace pvmm::detail::backend {
namespace {
void run_signal_work(void* data) {
  signal_work* w = static_cast<signal_work*>(data);
  // an expiry is in the error record
  (void)run_signal_op(w->view, w->op, w->peer, w->channel, w->timeout_ns, w->value, w->aborted_by);
  // What the view points into is let go of on a caller's thread, as on GPUs (core/deferred_release.hpp): the last
  // reference to a window may be this one, and its teardown may call user code. With no memory for the holder,
  // the work stays allocated (kept, never torn down here).
  if (w->keep) {
    auto* held = new (std::nothrow) std::shared_ptr<const void>(std::move(w->keep));
    if (held == nullptr) return;
    defer_release(held);
  }
  delete w;
}

// One stream memory operation: the word, the value, and whether it waits (else it writes).
struct memop {
  std::uint64_t* at;
  std::uint64_t value;
  bool wait;
};

void run_memop(void* data) {
  auto* m = static_cast<memop*>(data);
  if (!m->wait) {
    signal_store_release(m->at, m->value);
  } else {
    while (!compare_holds(signal_load_acquire(m->at), compare::ge, m->value)) std::this_thread::yield();
  }
  delete m;
}

status enqueue_memop(memop m, stream_handle s, int device) {
  auto* copy = new (std::nothrow) memop(m);
  if (copy == nullptr) return make_error(errc::out_of_memory, "no memory for the host function's arguments");
  auto launched = launch_host_function(s, device, run_memop, copy);
  if (!launched) delete copy;  // it never ran
  return launched;
}
}  // namespace

const char* stream_signals_missing(int) noexcept { return nullptr; }

const char* stream_memops_missing(int) noexcept { return nullptr; }

status enqueue_stream_write(std::uint64_t* at, std::uint64_t value, stream_handle s, int device, bool) {
  return enqueue_memop({at, value, false}, s, device);
}

status enqueue_stream_wait(const std::uint64_t* at, std::uint64_t value, stream_handle s, int device) {
  return enqueue_memop({const_cast<std::uint64_t*>(at), value, true}, s, device);  // only read
}

const char* same_context_waits_missing(int) noexcept { return nullptr; }  // each stream is a thread

status enqueue_signal(const signal_work& work, stream_handle s, int device) {
  auto* copy = new (std::nothrow) signal_work(work);
  if (copy == nullptr) return make_error(errc::out_of_memory, "no memory for the host function's arguments");
  auto launched = launch_host_function(s, device, run_signal_work, copy);
  if (!launched) delete copy;  // it never ran
  return launched;
}

status enqueue_release(const signal_work& work, int) {
  (void)run_signal_op(work.view, work.op, work.peer, work.channel, work.timeout_ns, work.value, work.aborted_by);
  return {};
}

status finish_releases(int) { return {}; }

status prepare_releases(int) { return {}; }

std::uint32_t wall_clock_khz(int) noexcept { return 0; }

}  // namespace pvmm::detail::backend
