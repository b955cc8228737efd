// Backend feature "posix_fd": physical memory exported and imported as POSIX file descriptors.
#pragma once

#include <cstddef>

#include "backend/device.hpp"

namespace pvmm::detail::backend {

result<bool> posix_fd_capability(int ordinal);
result<int> export_posix_fd(allocation_handle handle);  // a new fd, owned by the caller
result<allocation_handle> import_posix_fd(int fd, std::size_t size);

}  // namespace pvmm::detail::backend
