// NVTX memory registration (observe/nvtx.hpp). Compiled into the CUDA backend with PVMM_NVTX (the toolkit's nvtx3
// headers: header-only, they load the tool's injection library only when a tool such as compute-sanitizer set one),
// into the others without it (no-ops).
#include "observe/nvtx.hpp"

#include <cstdlib>
#include <cstring>

#include <pvmm/snapshot.hpp>

#include "core/operation.hpp"

#ifdef PVMM_NVTX
#include <nvtx3/nvToolsExtMem.h>
#endif

namespace pvmm {
namespace detail::observe::nvtx {

namespace {
bool from_environment() noexcept {
#ifdef PVMM_NVTX
  const char* v = std::getenv("PVMM_NVTX_MEMORY");
  return v != nullptr && std::strcmp(v, "0") != 0 && v[0] != '\0';
#else
  return false;
#endif
}
}  // namespace

std::atomic<bool> enabled{from_environment()};

#ifdef PVMM_NVTX
namespace {
nvtxDomainHandle_t domain() noexcept {
  static const nvtxDomainHandle_t d = nvtxDomainCreateA("pvmm");
  return d;
}
}  // namespace

void* register_heap(const void* base, std::size_t size) noexcept {
  nvtxMemVirtualRangeDesc_t range{};
  range.ptr = base;
  range.size = size;
  nvtxMemHeapDesc_t desc{};
  desc.extCompatID = NVTX_EXT_COMPATID_MEM;
  desc.structSize = sizeof(desc);
  desc.usage = NVTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR;
  desc.type = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
  desc.typeSpecificDescSize = sizeof(range);
  desc.typeSpecificDesc = &range;
  // No tool attached: NVTX answers null at next to no cost; the owner then keeps no heap and skips its blocks.
  return nvtxMemHeapRegister(domain(), &desc);
}

void unregister_heap(void* heap) noexcept { nvtxMemHeapUnregister(domain(), static_cast<nvtxMemHeapHandle_t>(heap)); }

void register_region(void* heap, const void* address, std::size_t size) noexcept {
  nvtxMemVirtualRangeDesc_t range{};
  range.ptr = address;
  range.size = size;
  nvtxMemRegionsRegisterBatch_t batch{};
  batch.extCompatID = NVTX_EXT_COMPATID_MEM;
  batch.structSize = sizeof(batch);
  batch.regionType = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
  batch.heap = static_cast<nvtxMemHeapHandle_t>(heap);
  batch.regionCount = 1;
  batch.regionDescElementSize = sizeof(range);
  batch.regionDescElements = &range;
  nvtxMemRegionsRegister(domain(), &batch);
}

void unregister_region(void*, const void* address) noexcept {
  nvtxMemRegionRef_t ref{};
  ref.pointer = address;
  nvtxMemRegionsUnregisterBatch_t batch{};
  batch.extCompatID = NVTX_EXT_COMPATID_MEM;
  batch.structSize = sizeof(batch);
  batch.refType = NVTX_MEM_REGION_REF_TYPE_POINTER;
  batch.refCount = 1;
  batch.refElementSize = sizeof(ref);
  batch.refElements = &ref;
  nvtxMemRegionsUnregister(domain(), &batch);
}
#else
void* register_heap(const void*, std::size_t) noexcept { return nullptr; }
void unregister_heap(void*) noexcept {}
void register_region(void*, const void*, std::size_t) noexcept {}
void unregister_region(void*, const void*) noexcept {}
#endif

}  // namespace detail::observe::nvtx

status register_with_nvtx(bool on) {
  const detail::operation op{"pvmm::register_with_nvtx"};
#ifdef PVMM_NVTX
  detail::observe::nvtx::enabled.store(on, std::memory_order_relaxed);
  return {};
#else
  if (!on) return {};
  return op.fail(errc::not_supported, "this build of pvmm has no NVTX (only the CUDA backend registers with it)",
                 "build pvmm with PVMM_BACKEND=cuda to check sub-allocations with compute-sanitizer");
#endif
}

bool nvtx_registration() noexcept { return detail::observe::nvtx::enabled.load(std::memory_order_relaxed); }

}  // namespace pvmm
