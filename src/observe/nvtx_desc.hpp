// The NVTX memory descriptors pvmm passes (observe/nvtx.cpp), built in place by pure functions so that a host test
// checks every field (tests/cuda/nvtx_desc.cpp): NVTX_EXT_COMPATID_MEM, structSize the structure's own size, a
// sub-allocator heap of virtual addresses, one range per call, zeroed elsewhere (the tool reads zero as "unset"),
// and nothing built for a null address or a size of 0. Needs the toolkit's nvtx3 headers (the CUDA build).
#pragma once

#include <cstddef>

#include <nvtx3/nvToolsExtMem.h>

namespace pvmm::detail::observe::nvtx {

/// A heap over [base, base + size): the descriptor points at its own range (fill it in place; not copyable).
struct heap_desc {
  nvtxMemVirtualRangeDesc_t range{};
  nvtxMemHeapDesc_t desc{};
  heap_desc() = default;
  heap_desc(const heap_desc&) = delete;
  heap_desc& operator=(const heap_desc&) = delete;
};

/// Fills `d` for [base, base + size); false (nothing to register) for a null base or a size of 0.
inline bool make_heap_desc(heap_desc& d, const void* base, std::size_t size) noexcept {
  if (base == nullptr || size == 0) return false;
  d.range = {};
  d.range.ptr = base;
  d.range.size = size;
  d.desc = {};
  d.desc.extCompatID = NVTX_EXT_COMPATID_MEM;
  d.desc.structSize = sizeof(d.desc);
  d.desc.usage = NVTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR;
  d.desc.type = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
  d.desc.typeSpecificDescSize = sizeof(d.range);
  d.desc.typeSpecificDesc = &d.range;
  return true;
}

/// One region [address, address + size) of `heap`.
struct region_desc {
  nvtxMemVirtualRangeDesc_t range{};
  nvtxMemRegionsRegisterBatch_t batch{};
  region_desc() = default;
  region_desc(const region_desc&) = delete;
  region_desc& operator=(const region_desc&) = delete;
};

/// Fills `d`; false for a null heap or address or a size of 0.
inline bool make_region_desc(region_desc& d, nvtxMemHeapHandle_t heap, const void* address, std::size_t size) noexcept {
  if (heap == nullptr || address == nullptr || size == 0) return false;
  d.range = {};
  d.range.ptr = address;
  d.range.size = size;
  d.batch = {};
  d.batch.extCompatID = NVTX_EXT_COMPATID_MEM;
  d.batch.structSize = sizeof(d.batch);
  d.batch.regionType = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
  d.batch.heap = heap;
  d.batch.regionCount = 1;
  d.batch.regionDescElementSize = sizeof(d.range);
  d.batch.regionDescElements = &d.range;
  d.batch.regionHandleElementsOut = nullptr;  // virtual-address regions are referred to by their pointer
  return true;
}

/// The region starting at `address`, referred to by its pointer.
struct unregister_desc {
  nvtxMemRegionRef_t ref{};
  nvtxMemRegionsUnregisterBatch_t batch{};
  unregister_desc() = default;
  unregister_desc(const unregister_desc&) = delete;
  unregister_desc& operator=(const unregister_desc&) = delete;
};

/// Fills `d`; false for a null address.
inline bool make_unregister_desc(unregister_desc& d, const void* address) noexcept {
  if (address == nullptr) return false;
  d.ref = {};
  d.ref.pointer = address;
  d.batch = {};
  d.batch.extCompatID = NVTX_EXT_COMPATID_MEM;
  d.batch.structSize = sizeof(d.batch);
  d.batch.refType = NVTX_MEM_REGION_REF_TYPE_POINTER;
  d.batch.refCount = 1;
  d.batch.refElementSize = sizeof(d.ref);
  d.batch.refElements = &d.ref;
  return true;
}

}  // namespace pvmm::detail::observe::nvtx
