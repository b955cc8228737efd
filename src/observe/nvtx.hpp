// Sub-allocations made known to NVIDIA's tools through the NVTX memory API (nvToolsExtMem.h): an owner that carves
// blocks out of memory it mapped (the caching allocator) registers each mapping of a range as a heap and each block
// handed out as regions of those heaps, so `compute-sanitizer --tool memcheck` reports an access outside every live
// block (one byte past a block, a block used after its free) that the mapping alone hides.
//
// One heap per mapping, not per range: compute-sanitizer takes a heap over one allocation it tracks (its NVTX guide:
// "any allocation created with cudaMalloc can be registered as a memory pool"), and a stitched range of several
// cuMemMap mappings is no single allocation. (With one heap per range the GPU run printed "Call to
// nvtxMemHeapRegister failed: One or more of the parameters is invalid"; that run's program had also not initialized
// the CUDA runtime, the tool's other requirement: tests/cuda/nvtx_overrun.cpp's raw modes tell the two apart.)
// A block over several chunks is registered as one region per chunk it covers (pieces(), each in its chunk's heap),
// and a chunk's heap goes before the chunk is unmapped (drop_chunk), so no heap outlives its mapping. No range of
// size 0 or at a null address is ever registered (nvtx_desc.hpp builds the descriptors; tests/cuda/nvtx_desc.cpp
// checks them).
//
// Off by default (pvmm::register_with_nvtx(true), or PVMM_NVTX_MEMORY=1 in the environment at load). Off, open()
// costs one relaxed load and returns null, and the block hooks test that null: nothing else. Only the CUDA
// build has NVTX (the toolkit's header-only nvtx3); elsewhere every call is a no-op and switching on is
// not_supported. Registration applies to ranges opened after it was switched on.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace pvmm::detail::observe::nvtx {

[[gnu::visibility("hidden")]] extern std::atomic<bool> enabled;

/// The heaps of one range of `count` mappings of `chunk` bytes each at `base` (nvtx.cpp).
struct heaps {
  const char* base = nullptr;
  std::size_t chunk = 0;
  std::vector<void*> heap;  // per mapping; null: none (no tool, or dropped)
};

/// One part of a region, inside one mapping: the mapping's index, where it starts, how long it is.
struct piece {
  std::size_t index = 0;
  const char* address = nullptr;
  std::size_t size = 0;
};

/// The parts of [address, address + size) in the mappings of `chunk` bytes from `base`, in order; none for size 0
/// or an address outside [base, base + chunk * count). Pure: host-tested (tests: nvtx pieces).
inline std::vector<piece> pieces(const char* base, std::size_t chunk, std::size_t count, const char* address,
                                 std::size_t size) {
  std::vector<piece> out;
  if (size == 0 || chunk == 0 || address < base) return out;
  const auto from = static_cast<std::size_t>(address - base);
  if (from / chunk >= count || size > chunk * count - from) return out;
  for (std::size_t at = from, end = from + size; at < end;) {
    const std::size_t index = at / chunk, stop = (index + 1) * chunk < end ? (index + 1) * chunk : end;
    out.push_back({index, base + at, stop - at});
    at = stop;
  }
  return out;
}

heaps* register_heaps(const void* base, std::size_t chunk, std::size_t count) noexcept;
void unregister_heaps(heaps* h) noexcept;
void unregister_heap(heaps* h, std::size_t index) noexcept;
void register_heap(heaps* h, std::size_t index) noexcept;
void register_region(heaps* h, const void* address, std::size_t size) noexcept;
void unregister_region(heaps* h, const void* address, std::size_t size) noexcept;

/// Heaps for the `count` mappings of `chunk` bytes at `base` while registration is on, else null (keep it with the
/// range). Null too where no tool listens.
inline heaps* open(const void* base, std::size_t chunk, std::size_t count) noexcept {
  return __builtin_expect(enabled.load(std::memory_order_relaxed), 0) ? register_heaps(base, chunk, count) : nullptr;
}
/// After mapping `index` of the range was mapped (a region grown in place): its heap, where the range has heaps.
inline void add_chunk(heaps* h, std::size_t index) noexcept {
  if (__builtin_expect(h != nullptr, 0)) register_heap(h, index);
}
/// Before mapping `index` of the range is unmapped.
inline void drop_chunk(heaps* h, std::size_t index) noexcept {
  if (__builtin_expect(h != nullptr, 0)) unregister_heap(h, index);
}
/// A block of `size` bytes (what was asked for, not the rounded size) handed out at `address`.
inline void region(heaps* h, const void* address, std::size_t size) noexcept {
  if (__builtin_expect(h != nullptr, 0)) register_region(h, address, size);
}
/// The block at `address`, `size` bytes as given to region(), given back.
inline void drop_region(heaps* h, const void* address, std::size_t size) noexcept {
  if (__builtin_expect(h != nullptr, 0)) unregister_region(h, address, size);
}

/// Owns a range's heaps (null: none); drops them when destroyed. Declare it after the range it covers.
class heap_owner {
 public:
  heap_owner() noexcept = default;
  heap_owner(const heap_owner&) = delete;
  heap_owner& operator=(const heap_owner&) = delete;
  ~heap_owner() { reset(nullptr); }
  void reset(heaps* h) noexcept {
    if (__builtin_expect(heaps_ != nullptr, 0)) unregister_heaps(heaps_);
    heaps_ = h;
  }
  heaps* get() const noexcept { return heaps_; }

 private:
  heaps* heaps_ = nullptr;
};

}  // namespace pvmm::detail::observe::nvtx
