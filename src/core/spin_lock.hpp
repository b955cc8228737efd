// Hot layout: spin_lock::lock is listed by mangled name in cmake/hot_layout.ld; a rename or a new signature drops it
// out of the layout (the CTest tools/hot_layout says so).
//
// A lock for critical sections of a few dozen instructions that never block or call a backend: one atomic
// exchange to take it and one store to give it back, about half of std::mutex's uncontended cost, which
// showed next to sub-microsecond driver calls (pvmm-own-cost). A waiter spins briefly, then yields its CPU,
// so a holder that was preempted is not starved. Meets BasicLockable (std::lock_guard works).
#pragma once

#include <atomic>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace pvmm::detail {

class spin_lock {
 public:
  // The uncontended exchange inline; the waiting out of line, so a caller's hot code holds only the exchange.
  void lock() noexcept {
    if (__builtin_expect(held_.exchange(true, std::memory_order_acquire), false)) lock_contended();
  }
  void unlock() noexcept { held_.store(false, std::memory_order_release); }

 private:
  [[gnu::noinline, gnu::cold]] void lock_contended() noexcept {
    do wait();
    while (held_.exchange(true, std::memory_order_acquire));
  }
  void wait() const noexcept {
    for (int spins = 0; held_.load(std::memory_order_relaxed); ++spins) {
      if (spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
        _mm_pause();
#endif
      } else {
        std::this_thread::yield();
      }
    }
  }
  std::atomic<bool> held_{false};
};

}  // namespace pvmm::detail
