// What the cases that export memory as POSIX fds share: the answer where the device cannot, and handing an export to
// an exec'd child.
#pragma once

#include "support.hpp"

namespace pvmm_test {

/// Whether device 0 exports POSIX fds; where it cannot, first checks that asking for them is not_supported (all a
/// case that needs them can assert there).
inline bool posix_fd_exports_or_refused() {
  if (caps().sharing.posix_fd) return true;
  auto p = default_properties();
  p.exportable = pvmm::handle_types::posix_fd;
  PVMM_CHECK_ERRC(pvmm::physical_allocation::create(granule(), p), pvmm::errc::not_supported);
  return false;
}

/// Sends `memory`'s POSIX fd on `socket` with the message "import" (what the child program's import commands wait
/// for); this process's fd is closed once sent.
inline void send_for_import(int socket, const pvmm::physical_allocation& memory) {
  auto fd = memory.export_posix_fd().value();
  int raw = fd.get();
  PVMM_CHECK_OK(pvmm::ipc::send_fds(socket, &raw, 1, "import", 6));
}

}  // namespace pvmm_test
