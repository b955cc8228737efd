// nvtx_overrun's raw modes (tools/gpu-nvtx-check.sh prints what compute-sanitizer says of each): the same one-byte
// overrun of a 1000-byte region, with pvmm out of the way, so a GPU run shows which memory compute-sanitizer takes
// as an NVTX heap:
//   raw-malloc  a heap over one cuMemAlloc allocation (NVIDIA's own sample: checks the tool itself)
//   raw-vmm     a heap over one cuMemCreate + cuMemMap mapping (what pvmm registers now: one heap per mapping)
//   raw-vmm2    a heap over one reservation holding two mappings (what pvmm registered before: one heap per range)
// Descriptors from src/observe/nvtx_desc.hpp, the ones pvmm passes.
#include <dlfcn.h>

#include <cstdio>
#include <string>

#include <cuda.h>

#include "nvtx_overrun.hpp"
#include "observe/nvtx_desc.hpp"

namespace nv = pvmm::detail::observe::nvtx;

int run_raw(void* lib, const std::string& mode, int (*poke)(CUdeviceptr, unsigned long long)) {
  auto mem_alloc = load<CUresult (*)(CUdeviceptr*, std::size_t)>(lib, "cuMemAlloc_v2");
  auto mem_free = load<CUresult (*)(CUdeviceptr)>(lib, "cuMemFree_v2");
  auto granularity = load<CUresult (*)(std::size_t*, const CUmemAllocationProp*, CUmemAllocationGranularity_flags)>(
      lib, "cuMemGetAllocationGranularity");
  auto create =
      load<CUresult (*)(CUmemGenericAllocationHandle*, std::size_t, const CUmemAllocationProp*, unsigned long long)>(
          lib, "cuMemCreate");
  auto release = load<CUresult (*)(CUmemGenericAllocationHandle)>(lib, "cuMemRelease");
  auto reserve = load<CUresult (*)(CUdeviceptr*, std::size_t, std::size_t, CUdeviceptr, unsigned long long)>(
      lib, "cuMemAddressReserve");
  auto address_free = load<CUresult (*)(CUdeviceptr, std::size_t)>(lib, "cuMemAddressFree");
  auto map =
      load<CUresult (*)(CUdeviceptr, std::size_t, std::size_t, CUmemGenericAllocationHandle, unsigned long long)>(
          lib, "cuMemMap");
  auto unmap = load<CUresult (*)(CUdeviceptr, std::size_t)>(lib, "cuMemUnmap");
  auto set_access =
      load<CUresult (*)(CUdeviceptr, std::size_t, const CUmemAccessDesc*, std::size_t)>(lib, "cuMemSetAccess");

  CUdeviceptr base = 0;
  std::size_t heap_size = 0, mappings = 0, unit = 0;
  CUmemGenericAllocationHandle handles[2] = {};
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  if (mode == "raw-malloc") {
    heap_size = std::size_t{4} << 20;
    if (auto r = mem_alloc(&base, heap_size); r != CUDA_SUCCESS) return fail("cuMemAlloc", r);
  } else {
    mappings = mode == "raw-vmm2" ? 2 : 1;
    if (auto r = granularity(&unit, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED); r != CUDA_SUCCESS)
      return fail("cuMemGetAllocationGranularity", r);
    heap_size = unit * mappings;
    if (auto r = reserve(&base, heap_size, 0, 0, 0); r != CUDA_SUCCESS) return fail("cuMemAddressReserve", r);
    for (std::size_t i = 0; i < mappings; ++i) {
      if (auto r = create(&handles[i], unit, &prop, 0); r != CUDA_SUCCESS) return fail("cuMemCreate", r);
      if (auto r = map(base + i * unit, unit, 0, handles[i], 0); r != CUDA_SUCCESS) return fail("cuMemMap", r);
    }
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (auto r = set_access(base, heap_size, &access, 1); r != CUDA_SUCCESS) return fail("cuMemSetAccess", r);
  }
  const nvtxDomainHandle_t domain = nvtxDomainCreateA("pvmm-raw");
  nv::heap_desc heap;
  nv::make_heap_desc(heap, reinterpret_cast<void*>(base), heap_size);
  const nvtxMemHeapHandle_t h = nvtxMemHeapRegister(domain, &heap.desc);
  nv::region_desc region;
  const bool registered = nv::make_region_desc(region, h, reinterpret_cast<void*>(base), 1000);
  if (registered) nvtxMemRegionsRegister(domain, &region.batch);
  const int rc = poke(base, 1000);  // one byte past the region
  std::printf("nvtx_overrun %s: heap of %zu bytes (%s) %s, region of 1000 bytes %s, wrote one byte past it\n",
              mode.c_str(), heap_size,
              mappings == 0   ? "cuMemAlloc"
              : mappings == 1 ? "one mapping"
                              : "two mappings",
              h ? "registered" : "not registered (no tool?)", registered ? "registered" : "not registered");
  if (h) nvtxMemHeapUnregister(domain, h);
  if (mode == "raw-malloc") {
    (void)mem_free(base);
  } else {
    for (std::size_t i = 0; i < mappings; ++i) {
      (void)unmap(base + i * unit, unit);
      (void)release(handles[i]);
    }
    (void)address_free(base, heap_size);
  }
  return rc;
}
