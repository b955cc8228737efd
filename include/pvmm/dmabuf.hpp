// pvmm/dmabuf.hpp - Linux dma-buf fds for mapped device memory, what a NIC registers (ibv_reg_dmabuf_mr, libfabric's
// FI_HMEM dmabuf, UCX): one dma-buf per mapping a range covers, so a buffer that spans physical chunks (a
// growable_buffer, several mappings side by side) is registered piece by piece.
//
// Portable semantics (every backend), checked in this order:
// - the range must be page-aligned (address and size: errc::unaligned; a null address is invalid_argument, size 0
//   invalid_size, a wrapping range out_of_range) and wholly mapped (errc::not_mapped), in pvmm reservations side
//   by side;
// - then capabilities.sharing.dmabuf, for the device of every piece's memory: errc::not_supported with the reason
//   where the backend or driver lacks it (host backend: its memory is a memfd, not a dma-buf; CUDA:
//   CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED and cuMemGetHandleForAddressRange, CUDA 11.7; HIP:
//   hipMemGetHandleForAddressRange, HIP 7.0, where the headers pvmm was built against declare it: HIP has no
//   attribute for the kernel driver's support, so there the export itself may fail with the runtime's error);
//   host-located physical memory is errc::not_supported;
// - each fd is the caller's (owned_fd closes it); the memory stays mapped and owned as before.
//
// Threading: any thread; the range must not be unmapped meanwhile.
#pragma once

#include <cstddef>
#include <vector>

#include <pvmm/error.hpp>
#include <pvmm/owned_fd.hpp>

namespace pvmm {

/// One piece of a range: a dma-buf whose byte 0 is at `address`.
struct dmabuf_piece {
  owned_fd fd;
  void* address = nullptr;
  std::size_t size = 0;
};

/// One dma-buf per mapping [address, address + size) covers, in address order (clipped to the range).
result<std::vector<dmabuf_piece>> export_dmabuf(const void* address, std::size_t size);

}  // namespace pvmm
