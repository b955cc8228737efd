// pvmm/owned_fd.hpp
#include <unistd.h>

#include <pvmm/owned_fd.hpp>

namespace pvmm {
void owned_fd::reset() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}
}  // namespace pvmm
