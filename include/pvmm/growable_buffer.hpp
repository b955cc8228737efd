// pvmm/growable_buffer.hpp - realloc without copy: a buffer whose physical memory is mapped on demand at the
// tail of a large reserved range.
//
// - Growth creates only the new chunks, maps them at the tail, and grants every registered device access to
//   the new chunks only (one grant call over all of them: grants cost ~40 us per call on H200).
// - When the range is full, the buffer first tries to reserve the addresses right after it; if they are taken
//   it moves: a larger range is reserved and the same physical chunks are mapped there (no data is copied),
//   and resize() says so, because every address into the buffer changes.
// - Shrinking unmaps and releases tail chunks.
// - Any failure rolls back completely: the buffer is as it was, nothing leaked.
// - Threading: not thread-safe: resize or release it from one thread at a time. A resize or release that starts
//   while another is running on the same buffer fails with errc::busy and changes nothing. The const accessors
//   may be called from several threads while nothing resizes it; moving or destroying it may not overlap any use.
//   Resizing is not ordered with device work in flight.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include <pvmm/allocation.hpp>
#include <pvmm/detail/unique_owner.hpp>
#include <pvmm/error.hpp>
#include <pvmm/reservation.hpp>
#include <pvmm/types.hpp>

namespace pvmm {

struct growable_options {
  allocation_properties properties;       ///< where chunks live and how they may be exported
  std::vector<access_descriptor> access;  ///< devices that get access to every chunk (at least one)
  std::size_t chunk_size = 0;             ///< physical chunk size; 0: 64 MiB (measured; see growable_buffer.cpp)
  std::size_t reserve_size = 0;           ///< address space reserved up front; 0: 1 GiB (rounded to chunks)
};

/// What resize() did.
struct resize_outcome {
  bool moved = false;       ///< the buffer moved to a new range: addresses into it changed
  void* address = nullptr;  ///< the buffer's address now
  std::size_t chunks_added = 0;
  std::size_t chunks_removed = 0;
};

/// Owns a growable buffer: its reservations and chunks. Move-only.
class growable_buffer : detail::move_only {
 public:
  growable_buffer() noexcept = default;  ///< empty (the private constructor below hides the implicit one)
  static result<growable_buffer> create(const growable_options& options);

  /// Grows or shrinks the mapped size to cover `size` bytes (rounded up to whole chunks).
  result<resize_outcome> resize(std::size_t size);

  /// Unmaps and releases every chunk, then frees the reserved ranges, now. errc::already_released when empty,
  /// errc::busy while another thread resizes it. A failure leaves the buffer valid, holding what it could not
  /// give back (chunks as they were; ranges from the last one on), so the call may be retried.
  status release() noexcept;

  bool valid() const noexcept { return state_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }

  void* data() const noexcept;
  std::size_t size() const noexcept;      ///< bytes mapped (a multiple of chunk_size())
  std::size_t capacity() const noexcept;  ///< bytes reserved
  std::size_t chunk_size() const noexcept;
  std::size_t reservation_count() const noexcept;  ///< more than one after growing into the adjacent range
  /// The physical chunks, in address order (for export: physical_allocation::export_posix_fd).
  const std::vector<physical_allocation>& chunks() const noexcept;

 private:
  struct state;
  /// Destroys the state where it is complete (ranges unmap and free; chunks release after their mappings).
  struct state_deleter {
    void operator()(state* s) const noexcept;
  };
  using state_owner = std::unique_ptr<state, state_deleter>;
  explicit growable_buffer(state_owner s) noexcept;
  state_owner state_;
};

}  // namespace pvmm
