// backend/fork_guard.hpp: a flag the fork handler sets (a failure outside a forked child costs one relaxed load) and
// the pid that initialised the driver, for the hint.
#include "backend/fork_guard.hpp"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <new>

#include <fmt/format.h>

namespace pvmm::detail {
namespace {

std::atomic<bool> forked_after_init{false};
std::atomic<long> initialised_by{0};  // the pid that initialised the driver (a forked child inherits it, and the once)

void in_child() noexcept { forked_after_init.store(true, std::memory_order_relaxed); }

}  // namespace

void note_driver_initialised() noexcept {
  static std::once_flag once;
  std::call_once(once, [] {
    initialised_by.store(static_cast<long>(::getpid()), std::memory_order_relaxed);
    (void)::pthread_atfork(nullptr, nullptr, in_child);  // fails only without memory: then no hint, nothing worse
  });
}

void explain_fork(error& e) noexcept {
  if (!forked_after_init.load(std::memory_order_relaxed)) return;
  e.code = errc::backend_unavailable;
  try {
    e.hint = fmt::format(
        "this process (pid {}) was forked after pvmm initialised the GPU driver in pid {}, and a GPU driver does not "
        "work in a forked child: start GPU processes with exec (posix_spawn, subprocess, Python multiprocessing's "
        "'spawn' or 'forkserver' method)",
        static_cast<long>(::getpid()), initialised_by.load(std::memory_order_relaxed));
  } catch (...) {  // the code says it; the hint is a nicety
  }
}

}  // namespace pvmm::detail
