// pvmm/symmetric_heap.hpp - many symmetric objects from one window (NVSHMEM's nvshmem_malloc / nvshmem_free).
//
// A symmetric heap hands out blocks of one symmetric window: allocate() is collective and returns the same offset
// on every rank, so block.peer(r) is rank r's copy of the object (at window.peer(r) + offset). One window, one
// reservation, one exchange per growth, instead of a collective window per object.
//
// Contract:
// - allocate(size, alignment) and free(offset) are collective: every rank calls them in the same order (with the
//   team's other collectives) and with the same arguments. The arguments are checked in one allgather: ranks that
//   disagree (another size, alignment, offset, or one allocating while another frees) fail with
//   errc::team_mismatch on every rank, naming the first rank that differs from rank 0; a rank whose own arguments
//   are bad (size 0: invalid_size; alignment not a power of two: invalid_alignment; a negative timeout:
//   invalid_argument) fails with its errc and every other rank fails at once naming it, whatever the order the ranks
//   arrive in. The heap is unchanged by a failed call, and a call fails on every rank alike: everything that can
//   fail (the free list's nodes too) happens before the call's agreement. Memory running out is out_of_memory,
//   never an exception.
// - The free list is the same on every rank (the same calls in the same order), so the offset needs no more
//   messages: first fit, blocks rounded up to min_alignment, neighbours coalesced on free.
// - When no free block fits, the window grows (doubling, at least to fit; symmetric_window::grow, one collective
//   step) up to max_size; past it, allocate fails with errc::out_of_memory on every rank alike (no exchange: every
//   rank's free list says the same).
// - Every call is bounded by its timeout; a rank that does not arrive makes the others fail naming it
//   (errc::timeout), as every team step. After team::abort(), calls fail with errc::peer_lost.
// - A block is a view: it stays valid while the heap lives and the block is not freed. Its pointers do not move
//   when the heap grows (the window's reservation holds max_size per slot from the start).
//
// Threading: as a window: one thread at a time; statistics() and a block's accessors may be read from any thread
// while no allocate, free or release runs.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include <pvmm/error.hpp>
#include <pvmm/team.hpp>

namespace pvmm {

namespace detail {
struct heap_state;
}  // namespace detail

struct heap_options {
  std::size_t size = 0;      ///< bytes of each rank's slot at first (> 0; rounded up to the granularity)
  std::size_t max_size = 0;  ///< the most it grows to (0: size); the same on every rank
  std::chrono::milliseconds timeout{30000};  ///< bounds the collective create
};

struct heap_statistics {
  std::size_t capacity = 0;           ///< bytes the heap spans now (the window's slot)
  std::size_t max_size = 0;           ///< the most it may grow to
  std::size_t bytes_in_use = 0;       ///< in live blocks (rounded sizes)
  std::size_t peak_bytes_in_use = 0;  ///< the most bytes_in_use has been
  std::size_t bytes_free = 0;         ///< capacity - bytes_in_use
  std::size_t allocation_count = 0;   ///< live blocks
  std::size_t grow_count = 0;         ///< how many times the window grew
};

/// One symmetric object: the same offset in every rank's slot.
class symmetric_block {
 public:
  symmetric_block() noexcept = default;
  bool valid() const noexcept { return window_ != nullptr; }
  std::size_t offset() const noexcept { return offset_; }
  std::size_t size() const noexcept { return size_; }  ///< as asked (the heap reserves it rounded up)
  void* local() const noexcept { return window_ ? peer(window_->rank()) : nullptr; }
  /// Rank `rank`'s copy, or nullptr where its slot is not mapped here.
  void* peer(int rank) const noexcept {
    auto* base = window_ ? static_cast<unsigned char*>(window_->peer(rank)) : nullptr;
    return base ? base + offset_ : nullptr;
  }

 private:
  friend class symmetric_heap;
  symmetric_block(const symmetric_window* w, std::size_t offset, std::size_t size) noexcept
      : window_(w), offset_(offset), size_(size) {}
  const symmetric_window* window_ = nullptr;
  std::size_t offset_ = 0;
  std::size_t size_ = 0;
};

/// A heap over a symmetric window. Move-only.
class symmetric_heap : detail::move_only {
 public:
  /// Every block's offset and size are multiples of this (and of the alignment asked).
  static constexpr std::size_t min_alignment = 256;

  /// Collective: a heap over a new window of options.size bytes per rank (symmetric_window::create).
  static result<symmetric_heap> create(const team& members, const heap_options& options);
  /// A heap over a window already made (by every rank, e.g. with create_from); local, no exchange. Its capacity is
  /// the smallest slot of any rank, its max_size the window's stride. The heap owns the window from now on.
  static result<symmetric_heap> over(symmetric_window window);

  symmetric_heap() noexcept = default;

  /// Collective (see above). `alignment`: a power of two (offsets are relative to each slot's start, which is
  /// aligned to the allocation granularity).
  result<symmetric_block> allocate(std::size_t size, std::size_t alignment = min_alignment,
                                   std::chrono::milliseconds timeout = std::chrono::milliseconds(30000));
  /// Collective: gives back the block at `offset` (errc::invalid_argument on every rank when no block starts
  /// there).
  status free(std::size_t offset, std::chrono::milliseconds timeout = std::chrono::milliseconds(30000));

  heap_statistics statistics() const noexcept;
  /// The window the blocks live in (empty when the heap is).
  const symmetric_window& window() const noexcept;
  /// Releases the window now (local). errc::already_released when empty.
  status release() noexcept;
  bool valid() const noexcept { return state_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }

 private:
  explicit symmetric_heap(std::shared_ptr<detail::heap_state> state) noexcept;
  std::shared_ptr<detail::heap_state> state_;  // its address is stable: blocks point at its window
};

}  // namespace pvmm
