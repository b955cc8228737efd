// Checks shared by the owners of memory.
#include "core/owner_checks.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include <fmt/format.h>

#include "backend/error_helpers.hpp"
#include "core/checked_math.hpp"

namespace pvmm::detail {

error released_owner(const operation& op, const char* what) {
  return op.fail(errc::already_released, fmt::format("this {} is empty (released or moved from)", what));
}

status check_size(std::size_t size, std::size_t unit, const char* what, const operation& op) {
  if (size == 0) return op.fail(errc::invalid_size, fmt::format("{} is zero", what));
  if (size % unit != 0) {
    auto rounded = checked_round_up(size, unit);
    if (!rounded)
      return op.fail(errc::out_of_memory, fmt::format("{} {:#x} rounded up to the granularity {:#x} exceeds what can "
                                                      "be addressed",
                                                      what, size, unit));
    return op.fail(errc::unaligned,
                   fmt::format("{} {:#x} is not a multiple of the granularity {:#x}", what, size, unit),
                   fmt::format("round up to {:#x}", *rounded));
  }
  return {};
}

std::size_t page_size() noexcept {
  static const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

status check_import_fd(int fd, std::size_t size, const operation& op) {
  if (size == 0) return op.fail(errc::invalid_size, "size is zero");
  if (fd < 0 || ::fcntl(fd, F_GETFD) < 0)
    return op.wrap(errno_error(errc::invalid_handle, "fcntl(F_GETFD)", EBADF,
                               fmt::format("fd {} is not an open file descriptor", fd)));
  return {};
}

status check_exportable(const allocation_properties& created_with, handle_types type, const operation& op) {
  if (contains(created_with.exportable, type)) return {};
  const char* name = type == handle_types::fabric ? "fabric" : "posix_fd";
  return op.fail(errc::handle_type_not_requested,
                 fmt::format("the allocation was not created with handle_types::{}", name),
                 fmt::format("add handle_types::{} to allocation_properties::exportable", name));
}

}  // namespace pvmm::detail
