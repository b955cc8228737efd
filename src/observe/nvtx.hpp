// Sub-allocations made known to NVIDIA's tools through the NVTX memory API (nvToolsExtMem.h): an owner that carves
// blocks out of memory it mapped (the caching allocator) registers each mapped range as a heap and each block
// handed out as a region of it, so `compute-sanitizer --tool memcheck` reports an access outside every live block
// (one byte past a block, a block used after its free) that the mapping alone hides.
//
// Off by default (pvmm::register_with_nvtx(true), or PVMM_NVTX_MEMORY=1 in the environment at load). Off, a heap()
// call costs one relaxed load and returns null, and the block hooks test that null: nothing else. Only the CUDA
// build has NVTX (the toolkit's header-only nvtx3); elsewhere every call is a no-op and switching on is
// not_supported. Registration applies to heaps registered after it was switched on.
#pragma once

#include <atomic>
#include <cstddef>

namespace pvmm::detail::observe::nvtx {

[[gnu::visibility("hidden")]] extern std::atomic<bool> enabled;

void* register_heap(const void* base, std::size_t size) noexcept;
void unregister_heap(void* heap) noexcept;
void register_region(void* heap, const void* address, std::size_t size) noexcept;
void unregister_region(void* heap, const void* address) noexcept;

/// A heap handle for [base, base + size) while registration is on, else null (keep it with the range).
inline void* heap(const void* base, std::size_t size) noexcept {
  return __builtin_expect(enabled.load(std::memory_order_relaxed), 0) ? register_heap(base, size) : nullptr;
}
/// Before the range is unmapped.
inline void drop_heap(void* heap) noexcept {
  if (__builtin_expect(heap != nullptr, 0)) unregister_heap(heap);
}
/// A block of `size` bytes (what was asked for, not the rounded size) handed out at `address` in `heap`.
inline void region(void* heap, const void* address, std::size_t size) noexcept {
  if (__builtin_expect(heap != nullptr, 0)) register_region(heap, address, size);
}
/// The block at `address` given back.
inline void drop_region(void* heap, const void* address) noexcept {
  if (__builtin_expect(heap != nullptr, 0)) unregister_region(heap, address);
}

/// Owns a heap handle (null: none); drops it when destroyed. Declare it after the range it covers.
class heap_owner {
 public:
  heap_owner() noexcept = default;
  heap_owner(const heap_owner&) = delete;
  heap_owner& operator=(const heap_owner&) = delete;
  ~heap_owner() { drop_heap(heap_); }
  void reset(void* heap) noexcept {
    drop_heap(heap_);
    heap_ = heap;
  }
  void* get() const noexcept { return heap_; }

 private:
  void* heap_ = nullptr;
};

}  // namespace pvmm::detail::observe::nvtx
