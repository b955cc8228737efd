// Backend feature "dmabuf": a Linux dma-buf fd for a mapped range of device memory, what a NIC registers
// (ibv_reg_dmabuf_mr, libfabric FI_HMEM dmabuf, UCX's dmabuf path).
#pragma once

#include <cstddef>

#include "backend/device.hpp"

namespace pvmm::detail::backend {

/// Whether the device exports dma-bufs for its VMM mappings.
result<bool> dmabuf_capability(int ordinal);
/// A new dma-buf fd for [address, address + size): one fully mapped range of one device's memory, host-page aligned.
/// `device` is the memory's device (the driver call needs its context current).
result<int> export_dmabuf(void* address, std::size_t size, int device);

}  // namespace pvmm::detail::backend
