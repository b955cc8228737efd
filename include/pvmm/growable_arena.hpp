// pvmm/growable_arena.hpp - a growable arena (the allocator a framework's caching allocator sits on when it keeps its
// own cache): one growable_buffer reserves a large range up front and maps physical chunks at its tail as allocations
// reach them, so memory is committed as it is used and every address stays put (the arena never grows past its
// reservation: it refuses instead of moving); freeing the highest allocations unmaps the chunks no allocation reaches
// any more, giving their physical memory back at once. The bookkeeping is a best-fit free list coalesced on free.
//
// Semantics:
// - allocate(size) gives at least `size` bytes at a multiple of `alignment` (512 B). errc::invalid_size for 0;
//   errc::out_of_memory (the arena unchanged) when the reservation cannot hold the rounded size, when the round-up
//   would overflow, or when mapping the chunks failed (the mapped chunks are rolled back);
// - deallocate(p) frees an allocation; no device work in flight may use it any more (the unmap of the chunks above
//   the highest allocation left is not ordered with device work: invariant 4). errc::invalid_argument for a pointer
//   the arena did not return, or one freed already;
// - the memory of a live allocation never moves and never changes backing (its generation is constant).
//
// Lifetime: release() refuses with errc::busy while allocations are live. The destructor gives everything back when
// none are; otherwise the memory stays mapped and valid until the process ends (never unmapped under the caller:
// invariant 17), as caching_allocator's.
//
// Threading: allocate, deallocate, stats and size_of may be called from several threads at once (one lock, held
// across the driver calls they make, never while user code runs). release(), moving or destroying the arena may
// not overlap any other use (the Python and C faces hold a reference across each call, so closing them while
// another thread is inside waits for that call's end instead).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include <pvmm/detail/unique_owner.hpp>
#include <pvmm/error.hpp>

namespace pvmm {

/// What a growable arena is created with.
struct arena_options {
  int device = 0;                ///< the device whose memory it maps
  std::size_t reserve_size = 0;  ///< address range reserved up front, all it can hold; 0: the device's total memory
  std::size_t chunk_size = 0;    ///< physical chunk; 0: growable_buffer's default (64 MiB)
};

/// What a growable arena holds and has done.
struct arena_stats {
  std::size_t allocations = 0;        ///< live allocations
  std::size_t allocated_bytes = 0;    ///< bytes in live allocations (each rounded up to the alignment)
  std::size_t mapped_bytes = 0;       ///< physical memory mapped now (whole chunks up to the highest allocation)
  std::size_t peak_mapped_bytes = 0;  ///< the most mapped at once
  std::size_t reserved_bytes = 0;     ///< the address range reserved up front (what the arena can hold)
  std::size_t grows = 0;              ///< resizes that mapped chunks
  std::size_t shrinks = 0;            ///< resizes that gave chunks back
};

/// A growable arena of one device's memory. Move-only.
class growable_arena : detail::move_only {
 public:
  /// Every allocation's address and size are multiples of this (CUDA's caching allocator rounds to 512 bytes).
  static constexpr std::size_t alignment = 512;

  growable_arena() noexcept;  ///< empty
  growable_arena(growable_arena&&) noexcept;
  growable_arena& operator=(growable_arena&&) noexcept;
  ~growable_arena();

  static result<growable_arena> create(const arena_options& options = {});

  result<void*> allocate(std::size_t size);
  status deallocate(void* pointer);
  arena_stats stats() const noexcept;
  /// The size of the allocation starting at `pointer`; 0 when it is none of this arena's.
  std::size_t size_of(const void* pointer) const noexcept;
  /// Whether `pointer` lies in this arena's reserved range.
  bool contains(const void* pointer) const noexcept;
  void* base() const noexcept;  ///< the start of the reserved range (nullptr when empty)
  int device() const noexcept;  ///< -1 when empty

  /// Gives everything back now. errc::busy while allocations are live; errc::already_released when empty.
  status release() noexcept;
  bool valid() const noexcept { return state_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }

 private:
  struct state;
  explicit growable_arena(std::unique_ptr<state> s) noexcept;
  std::unique_ptr<state> state_;
};

}  // namespace pvmm
