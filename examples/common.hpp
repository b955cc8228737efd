// What every example does around its work: say so and succeed where there is no device (the examples run as
// tests on machines without one), and turn a failed pvmm call into a message and exit status 1 (the examples
// call .value(), which throws pvmm::exception on an error, to stay short).
#pragma once

#include <cstdio>

#include <pvmm/pvmm.hpp>

namespace example {

/// Runs `body` (returning the exit status) where a device is present.
template <class Body>
int run(const char* name, Body&& body) {
  const auto backend = pvmm::query_backend();
  if (!backend.available || pvmm::device_count().value() == 0) {
    std::printf("%s: no device (%s)\n", name, backend.unavailable_reason.c_str());
    return 0;
  }
  try {
    return body();
  } catch (const pvmm::exception& e) {
    std::printf("%s: FAIL: %s\n", name, e.what());
    return 1;
  }
}

}  // namespace example
