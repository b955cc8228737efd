// NVTX memory registration (observe/nvtx.hpp). Compiled into the CUDA backend with PVMM_NVTX (the toolkit's nvtx3
// headers: header-only, they load the tool's injection library only when a tool such as compute-sanitizer set one),
// into the others without it (no-ops).
#include "observe/nvtx.hpp"

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include <pvmm/snapshot.hpp>

#include "core/operation.hpp"

#ifdef PVMM_NVTX
#include <algorithm>
#include <memory>

#include "observe/nvtx_desc.hpp"
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
/// Null where no tool listens (NVTX's no-op answer): then nothing is registered.
nvtxDomainHandle_t domain() noexcept {
  static const nvtxDomainHandle_t d = nvtxDomainCreateA("pvmm");
  return d;
}
/// What nvtxMemHeapRegister answers where no tool takes the call: null (nvtx3 as in CUDA 13) or the header's
/// NVTX_MEM_HEAP_HANDLE_NO_TOOL, -1 (spelled here: the macro's static_cast does not compile as C++).
bool no_heap(nvtxMemHeapHandle_t h) noexcept {
  return h == nullptr || reinterpret_cast<std::intptr_t>(h) == std::intptr_t{-1};
}
}  // namespace

heaps* register_heaps(const void* base, std::size_t chunk, std::size_t count) noexcept {
  if (domain() == nullptr || base == nullptr || chunk == 0 || count == 0) return nullptr;
  try {
    auto h = std::make_unique<heaps>();
    h->base = static_cast<const char*>(base);
    h->chunk = chunk;
    h->heap.assign(count, nullptr);
    for (std::size_t i = 0; i < count; ++i) register_heap(h.get(), i);
    const bool any = std::any_of(h->heap.begin(), h->heap.end(), [](void* x) { return x != nullptr; });
    return any ? h.release() : nullptr;  // none taken: no tool, nothing to keep
  } catch (...) {                        // std::bad_alloc: this range goes unregistered
    return nullptr;
  }
}

void unregister_heap(heaps* h, std::size_t index) noexcept {
  if (index >= h->heap.size() || h->heap[index] == nullptr) return;
  nvtxMemHeapUnregister(domain(), static_cast<nvtxMemHeapHandle_t>(h->heap[index]));
  h->heap[index] = nullptr;
}

void register_heap(heaps* h, std::size_t index) noexcept {
  try {
    if (index >= h->heap.size()) h->heap.resize(index + 1, nullptr);
  } catch (...) {  // std::bad_alloc: this mapping goes unregistered
    return;
  }
  const nvtxDomainHandle_t d = domain();
  heap_desc desc;
  if (d == nullptr || h->heap[index] != nullptr || !make_heap_desc(desc, h->base + index * h->chunk, h->chunk)) return;
  const nvtxMemHeapHandle_t made = nvtxMemHeapRegister(d, &desc.desc);
  if (!no_heap(made)) h->heap[index] = made;
}

void unregister_heaps(heaps* h) noexcept {
  for (std::size_t i = 0; i < h->heap.size(); ++i) unregister_heap(h, i);
  delete h;
}

void register_region(heaps* h, const void* address, std::size_t size) noexcept {
  try {
    for (const piece& p : pieces(h->base, h->chunk, h->heap.size(), static_cast<const char*>(address), size)) {
      region_desc desc;
      if (make_region_desc(desc, static_cast<nvtxMemHeapHandle_t>(h->heap[p.index]), p.address, p.size))
        nvtxMemRegionsRegister(domain(), &desc.batch);
    }
  } catch (...) {  // std::bad_alloc: this block goes unregistered (and so does its unregistration: same pieces)
  }
}

void unregister_region(heaps* h, const void* address, std::size_t size) noexcept {
  try {
    for (const piece& p : pieces(h->base, h->chunk, h->heap.size(), static_cast<const char*>(address), size)) {
      unregister_desc desc;
      if (h->heap[p.index] != nullptr && make_unregister_desc(desc, p.address))
        nvtxMemRegionsUnregister(domain(), &desc.batch);
    }
  } catch (...) {
  }
}
#else
heaps* register_heaps(const void*, std::size_t, std::size_t) noexcept { return nullptr; }
void unregister_heaps(heaps* h) noexcept { delete h; }
void unregister_heap(heaps*, std::size_t) noexcept {}
void register_heap(heaps*, std::size_t) noexcept {}
void register_region(heaps*, const void*, std::size_t) noexcept {}
void unregister_region(heaps*, const void*, std::size_t) noexcept {}
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
