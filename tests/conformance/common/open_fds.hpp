// How many fds this process has open: the suite's and the fuzz targets' leak check on fds.
#pragma once

#include <dirent.h>

#include <cstddef>

namespace pvmm_test {

inline std::size_t open_fd_count() {
  std::size_t n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d)) ++n;
    ::closedir(d);
  }
  return n;
}

}  // namespace pvmm_test
