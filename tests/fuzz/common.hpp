// Shared pieces of the fuzz targets: reading the input as a stream of choices, and counting open fds (every
// target checks that nothing it was handed stays open: a leak is a finding like a crash).
#pragma once

#include <dirent.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace pvmm_fuzz {

/// Takes bytes off the front of the input; 0 once it is used up.
struct input {
  const std::uint8_t* data;
  std::size_t size;
  std::uint8_t byte() {
    if (size == 0) return 0;
    --size;
    return *data++;
  }
};

inline std::size_t open_fds() {
  std::size_t n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d)) ++n;
    ::closedir(d);
  }
  return n;
}

/// A broken invariant: report it and abort, so libFuzzer saves the input.
[[noreturn]] inline void finding(const char* what) {
  std::fprintf(stderr, "pvmm fuzz finding: %s\n", what);
  std::abort();
}

}  // namespace pvmm_fuzz
