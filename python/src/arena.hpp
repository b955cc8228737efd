// A growable arena (PyTorch's allocator on pvmm's VMM): one growable buffer reserves a large range up front and maps
// physical chunks at its tail as allocations reach them, so memory is committed as it is used, every address stays
// put (the arena never grows past its reservation: it refuses instead of moving), and freeing the highest
// allocations unmaps the chunks no allocation reaches any more, giving their physical memory back at once. PyTorch's
// caching allocator keeps its own cache over it (it asks for segments and gives them back on empty_cache), so the
// arena's own bookkeeping is a simple best-fit free list.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include <pvmm/pvmm.hpp>

namespace pvmm_py {

class growable_arena {
 public:
  struct stats {
    std::size_t allocations = 0;
    std::size_t allocated_bytes = 0;    ///< bytes in live allocations (each rounded up to the alignment)
    std::size_t mapped_bytes = 0;       ///< physical memory mapped now (whole chunks up to the highest allocation)
    std::size_t peak_mapped_bytes = 0;  ///< the most mapped at once
    std::size_t reserved_bytes = 0;     ///< the address range reserved up front (what the arena can hold)
    std::size_t grows = 0;              ///< resizes that mapped chunks
    std::size_t shrinks = 0;            ///< resizes that gave chunks back
  };
  /// Every allocation's address and size are multiples of this (CUDA's caching allocator rounds to 512 bytes).
  static constexpr std::size_t alignment = 512;

  /// An arena on `device` reserving `reserve_size` bytes (0: the device's total memory) mapped in `chunk_size`
  /// chunks (0: pvmm's default, 64 MiB).
  static pvmm::result<std::unique_ptr<growable_arena>> create(int device, std::size_t reserve_size,
                                                              std::size_t chunk_size);
  /// At least `size` bytes; errc::out_of_memory (the arena unchanged) when the reservation cannot hold them.
  pvmm::result<void*> allocate(std::size_t size);
  /// Frees an allocation; unmaps the chunks above the highest allocation left. No work in flight may use it
  /// (the C entry point synchronizes the stream PyTorch names first).
  pvmm::status free(void* address);
  stats statistics() const;
  std::size_t size_of(void* address) const;  ///< an allocation's size, 0 when `address` is none
  void* base() const noexcept { return buffer_.data(); }
  int device() const noexcept { return device_; }

 private:
  growable_arena(int device, pvmm::growable_buffer buffer) noexcept;
  pvmm::status map_to(std::size_t size);  // lock_ held

  int device_;
  mutable std::mutex lock_;  // guards everything below; held across driver calls only, never while calling user code
  pvmm::growable_buffer buffer_;
  std::map<std::size_t, std::size_t> live_;  // offset -> size
  std::map<std::size_t, std::size_t> free_;  // offset -> size, coalesced, all below top_
  std::size_t top_ = 0;                      // the end of the highest allocation
  stats counters_;
};

}  // namespace pvmm_py
