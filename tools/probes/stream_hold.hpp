// A host function that holds a stream until the host releases it, bounded by a watchdog: how the probes keep work
// (a free) pending on a stream. Header-only, for the one-file probes (tools/probes/run.sh); needs probe_api.hpp.
#pragma once

#include <atomic>
#include <chrono>
#include <thread>

#include "probe_api.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

// Enqueues fn(user) on stream s as a host function. HIP's NVIDIA headers declare hipLaunchHostFunc only under nvcc's
// device compilation (__CUDACC__), which their CUDA-13-incompatible graph wrappers break, so the HIP variant built
// as plain C++ uses hipStreamAddCallback (a stream callback: it also holds the stream until it returns).
#if defined(PROBE_HIP) && !defined(__CUDACC__)
#define HOST_FN_CALL "hipStreamAddCallback"
struct host_call {
  void (*fn)(void*);
  void* user;
};
void host_trampoline(hipStream_t, hipError_t, void* p) {
  auto* c = static_cast<host_call*>(p);
  c->fn(c->user);
  delete c;
}
api_error launch_host(api_stream s, void (*fn)(void*), void* user) {
  auto* c = new host_call{fn, user};
  api_error e = hipStreamAddCallback(s, host_trampoline, c, 0);
  if (e != hipSuccess) delete c;
  return e;
}
#else
#define HOST_FN_CALL API_NAME "LaunchHostFunc"
api_error launch_host(api_stream s, void (*fn)(void*), void* user) { return API(LaunchHostFunc)(s, fn, user); }
#endif

// A host function that holds its stream until the host releases the flag (bounded: 6 s of its own, and a watchdog
// thread releases the flag after 5 s).
struct hold {
  std::atomic<int> entered{0};
  std::atomic<int> released{0};
  std::atomic<int> watchdog_fired{0};
  std::thread watchdog;

  static void host_fn(void* user) {
    auto* self = static_cast<hold*>(user);
    self->entered.store(1, std::memory_order_release);
    const auto deadline = clock_type::now() + std::chrono::seconds(6);
    while (self->released.load(std::memory_order_acquire) == 0 && clock_type::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
  }

  void start(api_stream s) {
    watchdog = std::thread([this] {
      const auto deadline = clock_type::now() + std::chrono::seconds(5);
      while (released.load(std::memory_order_acquire) == 0) {
        if (clock_type::now() >= deadline) {
          watchdog_fired.store(1);
          released.store(1, std::memory_order_release);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
    CHECK(launch_host(s, &hold::host_fn, this));
    // Wait (bounded by the watchdog) until the host function runs, so that s1 is really blocked.
    while (entered.load(std::memory_order_acquire) == 0 && released.load(std::memory_order_acquire) == 0)
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }

  void release() {
    released.store(1, std::memory_order_release);
    if (watchdog.joinable()) watchdog.join();
  }
};

}  // namespace
