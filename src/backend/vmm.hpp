// Backend feature "vmm": physical memory, address reservations, mappings and access.
#pragma once

#include <cstddef>

#include "backend/device.hpp"

namespace pvmm::detail::backend {

result<capabilities::vmm_features> vmm_capabilities(int ordinal);

result<allocation_handle> create(const allocation_properties& properties, std::size_t size);
status release(allocation_handle handle);
result<allocation_properties> properties(allocation_handle handle);

result<void*> reserve(std::size_t size, std::size_t alignment, const void* hint);
status free_reservation(void* address, std::size_t size);
status map(void* address, std::size_t size, allocation_handle handle, std::size_t handle_offset);
status unmap(void* address, std::size_t size);
status set_access(void* address, std::size_t size, const access_descriptor* grants, std::size_t count);
result<access> get_access(location where, const void* address);

}  // namespace pvmm::detail::backend
