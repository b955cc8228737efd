// HIP backend, feature "fabric": built only where the headers define the fabric handle type (CMake detects
// it; elsewhere the backend links the shared unsupported implementation). The runtime answers at export.
#include <cstring>

#include "backend/fabric.hpp"
#include "runtime.hpp"

namespace pvmm::detail::backend {
using namespace hip;

result<bool> fabric_capability(int) { return true; }

result<fabric_handle> export_fabric(allocation_handle handle) {
  PVMM_REQUIRE_RUNTIME();
  hipMemFabricHandle_t fh{};
  PVMM_HIP(hipMemExportToShareableHandle, &fh, to_hip(handle), hipMemHandleTypeFabric, 0);
  fabric_handle out;
  std::memcpy(out.bytes.data(), fh.data, out.bytes.size());
  return out;
}

result<allocation_handle> import_fabric(const fabric_handle& handle, std::size_t) {
  PVMM_REQUIRE_RUNTIME();
  hipMemFabricHandle_t fh{};
  std::memcpy(fh.data, handle.bytes.data(), handle.bytes.size());
  native_handle h{};
  if (hipError_t rc = hipMemImportFromShareableHandle(&h, &fh, hipMemHandleTypeFabric); rc != hipSuccess)
    return failure(rc, "hipMemImportFromShareableHandle", "",
                   rc == hipErrorOutOfMemory ? errc{} : errc::invalid_handle);
  return from_hip(h);
}

}  // namespace pvmm::detail::backend
