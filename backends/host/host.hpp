// What the host backend's feature files share: device 0 is the CPU, physical memory is a sealed memfd whose
// name carries the allocation's properties (so an importer in another process reads back what the exporter
// asked for).
#pragma once

#include <unistd.h>

#include <cstddef>
#include <string>

#include <fmt/format.h>

#include "backend/error_helpers.hpp"

namespace pvmm::detail::backend::host {

inline std::size_t page_size() {
  static const std::size_t size = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

/// "pvmm-d0-x1": location kind (d, h, n) and id, then the exportable handle types.
inline std::string encode_name(const allocation_properties& p) {
  return fmt::format("pvmm-{}{}-x{}", "dhn"[static_cast<int>(p.location.type)], p.location.id,
                     static_cast<unsigned>(p.exportable));
}

/// The properties a pvmm memfd's name carries; invalid_handle for anything else (it came from a peer).
result<allocation_properties> decode_properties(int fd);
/// invalid_handle unless `fd` is a memfd sealed against shrinking and growing (invariants 12 and 16): a peer that
/// kept the right to resize it could SIGBUS this process at its next access. `what` names the memory ("pool").
status check_size_seals(int fd, const char* what);

}  // namespace pvmm::detail::backend::host
