// pvmm/owned_fd.hpp
#include <unistd.h>

#include <cerrno>

#include <fmt/format.h>

#include <pvmm/owned_fd.hpp>

#include "backend/error_helpers.hpp"
#include "core/operation.hpp"

namespace pvmm {

status owned_fd::release() noexcept {
  auto args = [&] { return fmt::format("fd={}", fd_); };
  const detail::operation op{"pvmm::owned_fd::release", args};
  if (!valid()) return op.fail(errc::already_released, "this owned_fd is empty (released, detached or moved from)");
  const int fd = detach();
  if (::close(fd) == 0) return {};
  const int err = errno;
  return op.wrap(detail::errno_error(err == EBADF ? errc::invalid_handle : errc::system_error, "close", err,
                                     fmt::format("closing fd {}; the descriptor is freed all the same", fd)));
}

void owned_fd::reset() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace pvmm
