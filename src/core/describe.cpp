// Values as text for error details.
#include <fmt/format.h>

#include "core/describe.hpp"

namespace pvmm::detail {

std::string describe(location where) {
  switch (where.type) {
    case location::kind::device:
      return fmt::format("device {}", where.id);
    case location::kind::host:
      return "host";
    case location::kind::host_numa:
      return fmt::format("host NUMA node {}", where.id);
  }
  return fmt::format("location kind {}", static_cast<int>(where.type));
}

std::string describe(const allocation_properties& p) {
  return fmt::format("{{location={}, exportable={}{}, rdma={}, compression={}}}", describe(p.location),
                     contains(p.exportable, handle_types::posix_fd) ? "posix_fd " : "",
                     contains(p.exportable, handle_types::fabric) ? "fabric" : "", p.gpu_direct_rdma, p.compression);
}

const char* describe(access a) noexcept {
  static constexpr const char* names[] = {"none", "read", "read_write"};
  return enum_name(a, names, "invalid");
}

}  // namespace pvmm::detail
