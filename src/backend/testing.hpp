// Backend feature "testing": data movement for tests and self-checks (real programs use their own runtime).
#pragma once

#include <cstddef>

#include "backend/device.hpp"

namespace pvmm::detail::backend {

/// Synchronous copies run by `device` (chosen and validated by the neutral layer; it has access).
status copy_to_mapping(void* destination, const void* source, std::size_t size, int device);
status copy_from_mapping(void* destination, const void* source, std::size_t size, int device);
/// Whether a write at `address` by device 0 faults; not_supported where probing would be fatal.
result<bool> write_faults(void* address);

}  // namespace pvmm::detail::backend
