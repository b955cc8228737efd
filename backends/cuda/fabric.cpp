// CUDA backend, feature "fabric": fabric handles (multi-node NVLink; an IMEX channel grants permission).
#include "backend/fabric.hpp"
#include "driver.hpp"

namespace pvmm::detail::backend {
using namespace pvmm::cuda;

result<bool> fabric_capability(int ordinal) {
  return has_attribute(ordinal, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED);
}

result<fabric_handle> export_fabric(allocation_handle handle) { return export_fabric_handle(handle.value); }

result<allocation_handle> import_fabric(const fabric_handle& handle, std::size_t) {
  PVMM_TRY_ASSIGN(h, import_fabric_handle(handle));
  return allocation_handle{h};
}

}  // namespace pvmm::detail::backend
