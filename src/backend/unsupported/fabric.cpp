// Feature "fabric" for a backend that lacks it (host; hip where the headers have no fabric handle type).
#include "backend/fabric.hpp"
#include "backend/unsupported/unsupported.hpp"

namespace pvmm::detail::backend {

result<bool> fabric_capability(int) { return false; }
result<fabric_handle> export_fabric(allocation_handle) { return unsupported_feature("fabric handles"); }
result<allocation_handle> import_fabric(const fabric_handle&, std::size_t) {
  return unsupported_feature("fabric handles");
}

}  // namespace pvmm::detail::backend
