// Backend feature "pinned": page-locked host memory. The neutral layer has validated the arguments and keeps the
// registry of registered ranges (so double registration and unknown ranges answer the same on every backend).
#pragma once

#include <cstddef>

#include <pvmm/pinned.hpp>

#include "backend/device.hpp"

namespace pvmm::detail::backend {

result<capabilities::host_memory_features> host_memory_capabilities(int ordinal);
result<void*> allocate_pinned(std::size_t size, const pinned_options& options);
status free_pinned(void* pointer, std::size_t size);
status register_host(void* pointer, std::size_t size, const pinned_options& options);
status unregister_host(void* pointer, std::size_t size);
result<void*> host_device_pointer(void* pointer, int device);  // pinned or registered memory

}  // namespace pvmm::detail::backend
