// The small error helper a backend needs: it reports what failed (code, detail, native name and code, hint);
// the neutral layer adds the operation and its arguments. Backends include this and src/backend/*.hpp only. Also the
// body of a GPU backend function that is one native call (PVMM_BACKEND_ONE_CALL), which returns such a failure.
#pragma once

#include <string>

#include <pvmm/error.hpp>
#include <pvmm/types.hpp>

namespace pvmm::detail {

/// An error raised without a native error (the detail says what was wrong).
error make_error(errc code, std::string detail, std::string hint = {});

/// An operating-system call failed with `err`: the errno name and code, strerror, and what was being done.
error errno_error(errc code, const char* call, int err, std::string context = {});

/// Whether the host has NUMA node `node` (/sys/devices/system/node).
bool numa_node_exists(int node);

/// "device 0", "host", "host NUMA node 1".
std::string describe(location where);

}  // namespace pvmm::detail

/// The whole body of a backend function that is one native call, under the backend's own two macros: `require()`
/// (the driver or runtime is there) and `checked(call, args...)` (makes the call, returns its failure). The GPU
/// backends' PVMM_CU_STATUS and PVMM_HIP_STATUS are this. Always inlined: a function that cmake/hot_layout.ld
/// places keeps the call in its own code, not in an out-of-line lambda elsewhere.
// (Not clang-formatted: it would glue "->" to the attribute and split "()" from the lambda.)
// clang-format off
#define PVMM_BACKEND_ONE_CALL(require, checked, call, ...) \
  [&]() __attribute__((always_inline)) -> ::pvmm::status { \
    require();                                             \
    checked(call, __VA_ARGS__);                            \
    return {};                                             \
  }()
// clang-format on
