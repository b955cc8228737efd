// The NVTX memory descriptors pvmm registers with (src/observe/nvtx_desc.hpp) and how a block is split over the
// heaps of a range's mappings (src/observe/nvtx.hpp, pieces): host-checked, no GPU or tool needed. Every field a tool
// validates (compute-sanitizer: "Call to nvtxMemHeapRegister failed: One or more of the parameters is invalid")
// is checked against the header's own constants and sizes.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "observe/nvtx.hpp"
#include "observe/nvtx_desc.hpp"

namespace nv = pvmm::detail::observe::nvtx;

namespace {
char* at(std::uintptr_t a) { return reinterpret_cast<char*>(a); }
}  // namespace

TEST_CASE("a heap descriptor: the mem extension's compat id and sizes, a sub-allocator of virtual addresses") {
  nv::heap_desc d;
  REQUIRE(nv::make_heap_desc(d, at(0x7f0000000000), 4 << 20));
  CHECK(d.desc.extCompatID == NVTX_EXT_COMPATID_MEM);
  CHECK(d.desc.structSize == sizeof(nvtxMemHeapDesc_t));
  CHECK(d.desc.reserved0 == 0);
  CHECK(d.desc.usage == NVTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR);
  CHECK(d.desc.type == NVTX_MEM_TYPE_VIRTUAL_ADDRESS);
  CHECK(d.desc.typeSpecificDescSize == sizeof(nvtxMemVirtualRangeDesc_t));
  CHECK(d.desc.typeSpecificDesc == &d.range);
  CHECK(d.range.ptr == at(0x7f0000000000));
  CHECK(d.range.size == std::size_t{4} << 20);
  CHECK(d.desc.category == 0);
  CHECK(d.desc.messageType == 0);  // NVTX_MESSAGE_UNKNOWN: no name
}

TEST_CASE("no heap descriptor for a null base or a size of 0") {
  nv::heap_desc d;
  CHECK_FALSE(nv::make_heap_desc(d, nullptr, 4 << 20));
  CHECK_FALSE(nv::make_heap_desc(d, at(0x7f0000000000), 0));
}

TEST_CASE("a region descriptor: one virtual-address range in the heap, no handles asked back") {
  nv::region_desc d;
  auto heap = reinterpret_cast<nvtxMemHeapHandle_t>(at(0x1000));
  REQUIRE(nv::make_region_desc(d, heap, at(0x7f0000000200), 1000));
  CHECK(d.batch.extCompatID == NVTX_EXT_COMPATID_MEM);
  CHECK(d.batch.structSize == sizeof(nvtxMemRegionsRegisterBatch_t));
  CHECK(d.batch.regionType == NVTX_MEM_TYPE_VIRTUAL_ADDRESS);
  CHECK(d.batch.heap == heap);
  CHECK(d.batch.regionCount == 1);
  CHECK(d.batch.regionDescElementSize == sizeof(nvtxMemVirtualRangeDesc_t));
  CHECK(d.batch.regionDescElements == &d.range);
  CHECK(d.batch.regionHandleElementsOut == nullptr);
  CHECK(d.range.ptr == at(0x7f0000000200));
  CHECK(d.range.size == 1000);
  CHECK_FALSE(nv::make_region_desc(d, nullptr, at(0x7f0000000200), 1000));
  CHECK_FALSE(nv::make_region_desc(d, heap, nullptr, 1000));
  CHECK_FALSE(nv::make_region_desc(d, heap, at(0x7f0000000200), 0));
}

TEST_CASE("an unregister descriptor refers to the region by its pointer") {
  nv::unregister_desc d;
  REQUIRE(nv::make_unregister_desc(d, at(0x7f0000000200)));
  CHECK(d.batch.extCompatID == NVTX_EXT_COMPATID_MEM);
  CHECK(d.batch.structSize == sizeof(nvtxMemRegionsUnregisterBatch_t));
  CHECK(d.batch.refType == NVTX_MEM_REGION_REF_TYPE_POINTER);
  CHECK(d.batch.refCount == 1);
  CHECK(d.batch.refElementSize == sizeof(nvtxMemRegionRef_t));
  CHECK(d.batch.refElements == &d.ref);
  CHECK(d.ref.pointer == at(0x7f0000000200));
  CHECK_FALSE(nv::make_unregister_desc(d, nullptr));
}

TEST_CASE("a block is split at the mapping boundaries it crosses, each part in its mapping's heap") {
  const std::size_t mib = 1 << 20, chunk = 4 * mib;
  char* base = at(0x7f0000000000);
  SUBCASE("inside one mapping: one part") {
    auto p = nv::pieces(base, chunk, 2, base + 512, 1000);
    REQUIRE(p.size() == 1);
    CHECK(p[0].index == 0);
    CHECK(p[0].address == base + 512);
    CHECK(p[0].size == 1000);
  }
  SUBCASE("over two mappings (5 MiB + 1000 at the start): 4 MiB in the first, the rest in the second") {
    auto p = nv::pieces(base, chunk, 2, base, 5 * mib + 1000);
    REQUIRE(p.size() == 2);
    CHECK(p[0].index == 0);
    CHECK(p[0].address == base);
    CHECK(p[0].size == chunk);
    CHECK(p[1].index == 1);
    CHECK(p[1].address == base + chunk);
    CHECK(p[1].size == mib + 1000);
  }
  SUBCASE("ending exactly at a boundary: no empty part after it") {
    auto p = nv::pieces(base, chunk, 3, base + chunk - 512, 512 + chunk);
    REQUIRE(p.size() == 2);
    CHECK(p[0].size == 512);
    CHECK(p[1].index == 1);
    CHECK(p[1].size == chunk);
  }
  SUBCASE("nothing for a size of 0, or a range outside the mappings") {
    CHECK(nv::pieces(base, chunk, 2, base, 0).empty());
    CHECK(nv::pieces(base, chunk, 2, base - 512, 1000).empty());
    CHECK(nv::pieces(base, chunk, 2, base + 2 * chunk, 1000).empty());
    CHECK(nv::pieces(base, chunk, 2, base + chunk, chunk + 1).empty());
  }
}
