// How many fds and threads this process has open: the suites' (conformance, team) and the fuzz targets' leak
// checks on fds and threads.
#pragma once

#include <dirent.h>

#include <chrono>
#include <cstddef>
#include <thread>

namespace pvmm_test {

/// Entries of a /proc directory, "." and ".." left out (/proc/self/fd also lists the fd reading it: compare counts).
inline std::size_t directory_entries(const char* directory) {
  std::size_t n = 0;
  if (DIR* d = ::opendir(directory)) {
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') ++n;
    ::closedir(d);
  }
  return n;
}

inline std::size_t open_fd_count() { return directory_entries("/proc/self/fd"); }
/// Threads of this process.
inline std::size_t live_thread_count() { return directory_entries("/proc/self/task"); }

/// Threads of this process once no more than `expected` remain, or after a second: a joined thread can still be
/// listed in /proc/self/task for a moment after pthread_join returns (the kernel clears its tid, which wakes the
/// joiner, before it reaps the task), so a count taken at once may include it (seen once in CI's host stage).
inline std::size_t live_thread_count_settled(std::size_t expected) {
  std::size_t n = live_thread_count();
  for (int i = 0; i < 100 && n > expected; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    n = live_thread_count();
  }
  return n;
}

}  // namespace pvmm_test
