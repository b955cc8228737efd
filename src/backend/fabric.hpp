// Backend feature "fabric": physical memory exported and imported as fabric handles (multi-node NVLink).
#pragma once

#include <cstddef>

#include "backend/device.hpp"

namespace pvmm::detail::backend {

result<bool> fabric_capability(int ordinal);
result<fabric_handle> export_fabric(allocation_handle handle);
result<allocation_handle> import_fabric(const fabric_handle& handle, std::size_t size);

}  // namespace pvmm::detail::backend
