// How many fds and threads this process has open: the suites' (conformance, team) and the fuzz targets' leak
// checks on fds and threads.
#pragma once

#include <dirent.h>

#include <cstddef>

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

}  // namespace pvmm_test
