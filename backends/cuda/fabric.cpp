// CUDA backend, feature "fabric": fabric handles (multi-node NVLink; an IMEX channel grants permission).
#include <cstring>

#include "backend/fabric.hpp"
#include "driver.hpp"

namespace pvmm::detail::backend {
using namespace pvmm::cuda;

result<bool> fabric_capability(int ordinal) {
  PVMM_REQUIRE_DRIVER();
  CUdevice dev = 0;
  PVMM_CU(cuDeviceGet, &dev, ordinal);
  return attribute(dev, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED) != 0;
}

result<fabric_handle> export_fabric(allocation_handle handle) {
  PVMM_REQUIRE_DRIVER();
  CUmemFabricHandle fh{};
  if (CUresult rc = api().cuMemExportToShareableHandle(&fh, handle.value, CU_MEM_HANDLE_TYPE_FABRIC, 0);
      rc != CUDA_SUCCESS)
    return failure(rc, "cuMemExportToShareableHandle", rc == CUDA_ERROR_NOT_PERMITTED ? imex_hint : "");
  fabric_handle out;
  static_assert(sizeof(fh.data) == sizeof(out.bytes), "fabric handle size");
  std::memcpy(out.bytes.data(), fh.data, sizeof(fh.data));
  return out;
}

result<allocation_handle> import_fabric(const fabric_handle& handle, std::size_t) {
  PVMM_REQUIRE_DRIVER();
  CUmemFabricHandle fh{};
  std::memcpy(fh.data, handle.bytes.data(), sizeof(fh.data));
  CUmemGenericAllocationHandle h = 0;
  if (CUresult rc = api().cuMemImportFromShareableHandle(&h, &fh, CU_MEM_HANDLE_TYPE_FABRIC); rc != CUDA_SUCCESS) {
    // With no IMEX channel the driver refuses fabric imports as "not permitted" or "not supported" even on
    // devices that support fabric handles: both mean the system, not the device, says no.
    if (rc == CUDA_ERROR_NOT_PERMITTED || rc == CUDA_ERROR_NOT_SUPPORTED)
      return failure(rc, "cuMemImportFromShareableHandle", imex_hint, errc::not_permitted);
    return failure(rc, "cuMemImportFromShareableHandle", "", import_failure_code(rc));
  }
  return allocation_handle{h};
}

}  // namespace pvmm::detail::backend
