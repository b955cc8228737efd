// Checks the owners of memory (physical_allocation, multicast_object) share: empty owners, sizes against a
// granularity, fds handed in for import, and handle types an export needs.
#pragma once

#include <cstddef>

#include <pvmm/types.hpp>

#include "core/operation.hpp"

namespace pvmm::detail {

/// "this <what> is empty (released or moved from)".
error released_owner(const operation& op, const char* what);
/// A nonzero multiple of `unit` (sizes that cannot be rounded to it are out_of_memory).
status check_size(std::size_t size, std::size_t unit, const char* what, const operation& op);
/// The host's page size: every granularity is a multiple of it (an imported size is checked against it before the
/// driver sees the size).
std::size_t page_size() noexcept;
/// A nonzero size and an open fd.
status check_import_fd(int fd, std::size_t size, const operation& op);
/// The owner was created exportable as `type`.
status check_exportable(const allocation_properties& created_with, handle_types type, const operation& op);

}  // namespace pvmm::detail
