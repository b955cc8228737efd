// Shared pieces of the fuzz targets: reading the input as a stream of choices, and counting open fds (every
// target checks that nothing it was handed stays open: a leak is a finding like a crash).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "../conformance/common/open_fds.hpp"

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

using pvmm_test::open_fd_count;

/// A broken invariant: report it and abort, so libFuzzer saves the input.
[[noreturn]] inline void finding(const char* what) {
  std::fprintf(stderr, "pvmm fuzz finding: %s\n", what);
  std::abort();
}

}  // namespace pvmm_fuzz
