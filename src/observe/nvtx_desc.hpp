// The NVTX memory descriptors pvmm passes (observe/nvtx.cpp), built in place by pure functions so that a host test
// checks every field (tests/cuda/nvtx_desc.cpp): NVTX_EXT_COMPATID_MEM, structSize the structure's own size, a
// sub-allocator heap of virtual addresses, one range per call, zeroed elsewhere (the tool reads zero as "unset"),
// and nothing built for a null address or a size of 0. Needs the toolkit's nvtx3 headers (the CUDA build).
#pragma once

#include <cstddef>

#include <nvtx3/nvToolsExtMem.h>

namespace pvmm::detail::observe::nvtx {

/// What every descriptor below is: a call's structure pointing at an element stored beside it, so it is filled in
/// place and never copied (a copy would point at the original's element).
struct filled_in_place {
  filled_in_place() = default;
  filled_in_place(const filled_in_place&) = delete;
  filled_in_place& operator=(const filled_in_place&) = delete;
};

/// A structure of the mem extension, zeroed but for the two fields every one of them opens with.
template <class T>
T mem_struct() noexcept {
  T t{};
  t.extCompatID = NVTX_EXT_COMPATID_MEM;
  t.structSize = sizeof(T);
  return t;
}

/// One virtual-address range [ptr, ptr + size).
inline nvtxMemVirtualRangeDesc_t virtual_range(const void* ptr, std::size_t size) noexcept {
  nvtxMemVirtualRangeDesc_t r{};
  r.ptr = ptr;
  r.size = size;
  return r;
}

/// A heap over [base, base + size): the descriptor points at its own range.
struct heap_desc : filled_in_place {
  nvtxMemVirtualRangeDesc_t range{};
  nvtxMemHeapDesc_t desc{};
};

/// Fills `d` for [base, base + size); false (nothing to register) for a null base or a size of 0.
inline bool make_heap_desc(heap_desc& d, const void* base, std::size_t size) noexcept {
  if (base == nullptr || size == 0) return false;
  d.range = virtual_range(base, size);
  d.desc = mem_struct<nvtxMemHeapDesc_t>();
  d.desc.usage = NVTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR;
  d.desc.type = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
  d.desc.typeSpecificDescSize = sizeof(d.range);
  d.desc.typeSpecificDesc = &d.range;
  return true;
}

/// One region [address, address + size) of `heap`.
struct region_desc : filled_in_place {
  nvtxMemVirtualRangeDesc_t range{};
  nvtxMemRegionsRegisterBatch_t batch{};
};

/// Fills `d`; false for a null heap or address or a size of 0.
inline bool make_region_desc(region_desc& d, nvtxMemHeapHandle_t heap, const void* address, std::size_t size) noexcept {
  if (heap == nullptr || address == nullptr || size == 0) return false;
  d.range = virtual_range(address, size);
  d.batch = mem_struct<nvtxMemRegionsRegisterBatch_t>();
  d.batch.regionType = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
  d.batch.heap = heap;
  d.batch.regionCount = 1;
  d.batch.regionDescElementSize = sizeof(d.range);
  d.batch.regionDescElements = &d.range;
  d.batch.regionHandleElementsOut = nullptr;  // virtual-address regions are referred to by their pointer
  return true;
}

/// The region starting at `address`, referred to by its pointer.
struct unregister_desc : filled_in_place {
  nvtxMemRegionRef_t ref{};
  nvtxMemRegionsUnregisterBatch_t batch{};
};

/// Fills `d`; false for a null address.
inline bool make_unregister_desc(unregister_desc& d, const void* address) noexcept {
  if (address == nullptr) return false;
  d.ref = {};
  d.ref.pointer = address;
  d.batch = mem_struct<nvtxMemRegionsUnregisterBatch_t>();
  d.batch.refType = NVTX_MEM_REGION_REF_TYPE_POINTER;
  d.batch.refCount = 1;
  d.batch.refElementSize = sizeof(d.ref);
  d.batch.refElements = &d.ref;
  return true;
}

}  // namespace pvmm::detail::observe::nvtx
