// The small error helper a backend needs: it reports what failed (code, detail, native name and code, hint);
// the neutral layer adds the operation and its arguments. Backends include this and src/backend/*.hpp only.
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
