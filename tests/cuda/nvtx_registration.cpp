// NVTX registration of the caching allocator's blocks (src/observe/nvtx.*) on the CUDA backend without a GPU: the
// fake driver, and a fake NVTX tool (nvtx_fake_tool.cpp) loaded as compute-sanitizer's is, through
// NVTX_INJECTION64_PATH. What a tool gets: one heap per mapping (a chunk: compute-sanitizer takes a heap over one
// allocation it tracks, and a range of several mappings is none), every block registered as regions of the size
// asked for, each inside a live heap (a block over two chunks: one region in each), every region and heap
// unregistered, no heap alive over memory the driver unmaps, no descriptor refused.
#define DOCTEST_CONFIG_IMPLEMENT
#include <dlfcn.h>

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <pvmm/pvmm.hpp>

#include "fake_driver.hpp"
#include "nvtx_fake_tool.hpp"

namespace {

std::vector<pvmm_fake_nvtx_event>* events = nullptr;

std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

/// Replays the log: every rule above; what broke, one line each (empty: none).
std::string broken(std::size_t chunk) {
  struct span {
    std::uintptr_t lo, hi;
  };
  std::map<std::uintptr_t, span> heaps;    // live, by handle
  std::map<std::uintptr_t, span> regions;  // live, by address
  std::vector<std::string> out;
  for (const auto& e : *events) {
    const std::uintptr_t lo = addr(e.ptr), hi = lo + e.size;
    switch (e.kind) {
      case pvmm_fake_nvtx_bad:
        out.push_back("refused: " + e.why);
        break;
      case pvmm_fake_nvtx_heap:
        if (e.size != chunk) out.push_back("a heap of " + std::to_string(e.size) + " bytes, not one chunk");
        heaps[e.heap] = {lo, hi};
        break;
      case pvmm_fake_nvtx_heap_gone:
        if (!heaps.erase(e.heap)) out.push_back("a heap unregistered twice or never registered");
        break;
      case pvmm_fake_nvtx_region: {
        auto h = heaps.find(e.heap);
        if (h == heaps.end())
          out.push_back("a region in a heap not alive");
        else if (lo < h->second.lo || hi > h->second.hi)
          out.push_back("a region outside its heap");
        if (!regions.emplace(lo, span{lo, hi}).second) out.push_back("a region registered twice");
        break;
      }
      case pvmm_fake_nvtx_region_gone:
        if (!regions.erase(lo)) out.push_back("a region unregistered that was not registered");
        break;
      case pvmm_fake_nvtx_unmap:
        for (auto& [handle, s] : heaps)
          if (s.lo < hi && lo < s.hi) out.push_back("a heap alive over memory the driver unmaps");
        break;
    }
  }
  if (!heaps.empty()) out.push_back(std::to_string(heaps.size()) + " heap(s) never unregistered");
  if (!regions.empty()) out.push_back(std::to_string(regions.size()) + " region(s) never unregistered");
  std::string text;
  for (const auto& line : out) text += line + "\n";
  return text;
}

std::size_t count(pvmm_fake_nvtx_kind k) {
  std::size_t n = 0;
  for (const auto& e : *events) n += e.kind == k;
  return n;
}

}  // namespace

TEST_CASE("caching allocator blocks reach an NVTX tool as regions of one heap per mapping, all unregistered") {
  auto table = pvmm::cuda::fake::table();
  table.cuMemUnmap = [](CUdeviceptr p, std::size_t size) {
    events->push_back({pvmm_fake_nvtx_unmap, reinterpret_cast<const void*>(p), size, 0, {}});
    return CUDA_SUCCESS;
  };
  const pvmm::cuda::fake::installed_table driver(table);
  REQUIRE(pvmm::register_with_nvtx(true).has_value());
  auto s = pvmm::stream::create(0).value();
  auto cache = pvmm::caching_allocator::create({}).value();
  const std::size_t chunk = cache.chunk_size();
  events->clear();
  void* small = cache.allocate(1000, s).value();
  // Over two chunks: the rest of small's region grown in place by one chunk, a heap for the new mapping.
  void* big = cache.allocate(chunk + chunk / 4 + 1000, s).value();
  CHECK(count(pvmm_fake_nvtx_heap) == 2);    // one mapping, then one more
  CHECK(count(pvmm_fake_nvtx_region) == 3);  // 1000; then a chunk and the rest
  for (const auto& e : *events)
    if (e.kind == pvmm_fake_nvtx_region && addr(e.ptr) == addr(small)) CHECK(e.size == 1000);
  REQUIRE(cache.deallocate(small, s).has_value());
  REQUIRE(cache.deallocate(big, s).has_value());
  CHECK(count(pvmm_fake_nvtx_region_gone) == 3);
  REQUIRE(cache.release().has_value());
  REQUIRE(s.release().has_value());
  CHECK(count(pvmm_fake_nvtx_unmap) == 2);
  CHECK(broken(chunk) == "");
  REQUIRE(pvmm::register_with_nvtx(false).has_value());
}

TEST_CASE("registration off: the tool hears nothing") {
  auto table = pvmm::cuda::fake::table();
  const pvmm::cuda::fake::installed_table driver(table);
  REQUIRE(pvmm::register_with_nvtx(false).has_value());
  auto s = pvmm::stream::create(0).value();
  auto cache = pvmm::caching_allocator::create({}).value();
  events->clear();
  void* p = cache.allocate(1000, s).value();
  REQUIRE(cache.deallocate(p, s).has_value());
  REQUIRE(cache.release().has_value());
  CHECK(events->empty());
}

int main(int argc, char** argv) {
  // The tool first, as compute-sanitizer's: NVTX reads the variable at pvmm's first NVTX call.
  setenv("NVTX_INJECTION64_PATH", PVMM_FAKE_NVTX_TOOL, 1);
  void* tool = dlopen(PVMM_FAKE_NVTX_TOOL, RTLD_NOW);
  if (tool == nullptr) {
    std::printf("nvtx_registration: the fake tool did not load: %s\n", dlerror());
    return 1;
  }
  events = static_cast<std::vector<pvmm_fake_nvtx_event>*>(
      reinterpret_cast<void* (*)()>(dlsym(tool, "pvmm_fake_nvtx_events"))());
  doctest::Context context(argc, argv);
  return context.run();
}
