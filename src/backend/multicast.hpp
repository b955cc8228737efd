// Backend feature "multicast": multicast objects, their team, bound memory, mapping and sharing.
#pragma once

#include <cstddef>

#include "backend/device.hpp"

namespace pvmm::detail::backend {

struct multicast_request {
  unsigned team_size = 0;
  std::size_t size = 0;
  handle_types exportable = handle_types::none;
};

result<bool> multicast_capability(int ordinal);
result<granularity> multicast_granularity(const multicast_request& request);
result<multicast_handle> multicast_create(const multicast_request& request);
status multicast_release(multicast_handle object);
status multicast_add_device(multicast_handle object, int ordinal);
status multicast_bind(multicast_handle object, std::size_t offset, allocation_handle memory, std::size_t memory_offset,
                      std::size_t size);
status multicast_unbind(multicast_handle object, int ordinal, std::size_t offset, std::size_t size);
status multicast_map(void* address, std::size_t size, multicast_handle object, std::size_t offset);
result<int> multicast_export_posix_fd(multicast_handle object);
result<multicast_handle> multicast_import_posix_fd(int fd, std::size_t size);
result<fabric_handle> multicast_export_fabric(multicast_handle object);
result<multicast_handle> multicast_import_fabric(const fabric_handle& handle, std::size_t size);

}  // namespace pvmm::detail::backend
