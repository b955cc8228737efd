// A fake NVTX tool (loaded through NVTX_INJECTION64_PATH, as compute-sanitizer's is) for tests/cuda/nvtx_registration:
// it answers nvtxDomainCreateA and the memory extension's heap and region calls, checks each descriptor's fields the
// way a tool must (compat id, struct size, sub-allocator heap of virtual addresses, one range, no size 0, no null),
// and logs every call in order beside the events the test adds (the driver's unmaps), for the test to replay.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nvtx3/nvToolsExt.h>
#include <nvtx3/nvToolsExtMem.h>

#include "nvtx_fake_tool.hpp"

namespace {
std::vector<pvmm_fake_nvtx_event> events;
std::uintptr_t next_heap = 0x10000;

void bad(const std::string& why) { events.push_back({pvmm_fake_nvtx_bad, nullptr, 0, 0, why}); }

nvtxDomainHandle_t NVTX_API domain_create(const char*) {
  return reinterpret_cast<nvtxDomainHandle_t>(std::uintptr_t{0xd0});
}

nvtxMemHeapHandle_t NVTX_API heap_register(nvtxDomainHandle_t d, const nvtxMemHeapDesc_t* desc) {
  if (d == nullptr || desc == nullptr) return bad("heap: null domain or descriptor"), nullptr;
  if (desc->extCompatID != NVTX_EXT_COMPATID_MEM || desc->structSize != sizeof(nvtxMemHeapDesc_t) ||
      desc->usage != NVTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR || desc->type != NVTX_MEM_TYPE_VIRTUAL_ADDRESS ||
      desc->typeSpecificDescSize != sizeof(nvtxMemVirtualRangeDesc_t) || desc->typeSpecificDesc == nullptr)
    return bad("heap: descriptor fields"), nullptr;
  const auto* r = static_cast<const nvtxMemVirtualRangeDesc_t*>(desc->typeSpecificDesc);
  if (r->ptr == nullptr || r->size == 0) return bad("heap: null address or size 0"), nullptr;
  const std::uintptr_t h = next_heap++;
  events.push_back({pvmm_fake_nvtx_heap, r->ptr, r->size, h, {}});
  return reinterpret_cast<nvtxMemHeapHandle_t>(h);
}

void NVTX_API heap_unregister(nvtxDomainHandle_t d, nvtxMemHeapHandle_t h) {
  if (d == nullptr || h == nullptr) return bad("heap unregister: null domain or heap");
  events.push_back({pvmm_fake_nvtx_heap_gone, nullptr, 0, reinterpret_cast<std::uintptr_t>(h), {}});
}

void NVTX_API regions_register(nvtxDomainHandle_t d, const nvtxMemRegionsRegisterBatch_t* b) {
  if (d == nullptr || b == nullptr) return bad("regions: null domain or batch");
  if (b->extCompatID != NVTX_EXT_COMPATID_MEM || b->structSize != sizeof(nvtxMemRegionsRegisterBatch_t) ||
      b->regionType != NVTX_MEM_TYPE_VIRTUAL_ADDRESS || b->heap == nullptr || b->regionCount != 1 ||
      b->regionDescElementSize != sizeof(nvtxMemVirtualRangeDesc_t) || b->regionDescElements == nullptr)
    return bad("regions: batch fields");
  const auto* r = static_cast<const nvtxMemVirtualRangeDesc_t*>(b->regionDescElements);
  if (r->ptr == nullptr || r->size == 0) return bad("regions: null address or size 0");
  events.push_back({pvmm_fake_nvtx_region, r->ptr, r->size, reinterpret_cast<std::uintptr_t>(b->heap), {}});
}

void NVTX_API regions_unregister(nvtxDomainHandle_t d, const nvtxMemRegionsUnregisterBatch_t* b) {
  if (d == nullptr || b == nullptr) return bad("unregister: null domain or batch");
  if (b->extCompatID != NVTX_EXT_COMPATID_MEM || b->structSize != sizeof(nvtxMemRegionsUnregisterBatch_t) ||
      b->refType != NVTX_MEM_REGION_REF_TYPE_POINTER || b->refCount != 1 ||
      b->refElementSize != sizeof(nvtxMemRegionRef_t) || b->refElements == nullptr)
    return bad("unregister: batch fields");
  const auto* ref = static_cast<const nvtxMemRegionRef_t*>(b->refElements);
  events.push_back({pvmm_fake_nvtx_region_gone, ref->pointer, 0, 0, {}});
}
}  // namespace

extern "C" {

__attribute__((visibility("default"))) void* pvmm_fake_nvtx_events() { return &events; }

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get) {
  const auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get(NVTX_ETID_CALLBACKS));
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (callbacks == nullptr || !callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size) ||
      size <= NVTX_CBID_CORE2_DomainCreateA)
    return 0;
  *table[NVTX_CBID_CORE2_DomainCreateA] = reinterpret_cast<NvtxFunctionPointer>(&domain_create);
  return 1;
}

__attribute__((visibility("default"))) int InitializeInjectionNvtxExtension(nvtxExtModuleInfo_t* info) {
  if (info == nullptr || info->moduleId != NVTX_EXT_MODULEID_MEM || info->segmentsCount < 1) return 1;
  intptr_t* slots = info->segments[0].functionSlots;
  slots[NVTX3EXT_CBID_nvtxMemHeapRegister] = reinterpret_cast<intptr_t>(&heap_register);
  slots[NVTX3EXT_CBID_nvtxMemHeapUnregister] = reinterpret_cast<intptr_t>(&heap_unregister);
  slots[NVTX3EXT_CBID_nvtxMemRegionsRegister] = reinterpret_cast<intptr_t>(&regions_register);
  slots[NVTX3EXT_CBID_nvtxMemRegionsUnregister] = reinterpret_cast<intptr_t>(&regions_unregister);
  return 1;
}

}  // extern "C"
