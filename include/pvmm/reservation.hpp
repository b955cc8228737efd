// pvmm/reservation.hpp - address reservations, the mappings inside them, and access control.
//
// Portable semantics (every backend, checked in one place):
// - offsets and sizes are multiples of the mapped allocation's minimum granularity;
// - a mapping may not overlap another; unmap and set_access work on whole mappings: their range must start
//   and end on mapping boundaries and be fully mapped (a range may cover several adjacent mappings);
// - a new mapping has no access until access is granted; mapping again after an unmap needs a new grant;
// - unmap and release are not ordered with device work in flight: synchronise the devices first;
// - a fixed-address hint is a requirement: if the range lands elsewhere it is given back and
//   errc::address_unavailable is reported.
//
// Threading: reservations, and the process-wide lookups retain(address) and query_access(address), may be
// used from any thread. One address_reservation may be used from several threads at once for map, unmap,
// set_access and the read-only accessors on different mappings; two threads acting on the same mapping at
// once get errc::busy for the one that comes second (never a corrupted table). Moving, releasing or
// destroying a reservation while another thread uses it is not allowed, as for any C++ object.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include <pvmm/allocation.hpp>
#include <pvmm/detail/unique_owner.hpp>
#include <pvmm/error.hpp>
#include <pvmm/multicast.hpp>
#include <pvmm/types.hpp>

namespace pvmm {

namespace detail {
struct reservation_state;
/// Tears a reservation's state down and keeps it for reuse (the library defines it).
struct reservation_recycler {
  void operator()(reservation_state* state) const noexcept;
};
}  // namespace detail

/// Owns one reserved virtual address range and every mapping made inside it. Move-only.
/// The destructor unmaps whatever is still mapped, then frees the range with its exact (address, size);
/// mapped allocations stay alive as long as a mapping refers to them.
class address_reservation : detail::move_only {
 public:
  address_reservation() noexcept = default;  ///< empty (the private constructor below hides the implicit one)
  /// Reserves `size` bytes (a multiple of reservation_granularity()) aligned to `alignment` (0 or a power of two;
  /// the range is aligned to at least reservation_granularity()), at `fixed_address` when given.
  static result<address_reservation> reserve(std::size_t size, std::size_t alignment = 0,
                                             const void* fixed_address = nullptr);

  /// Maps `size` bytes of `memory`, from `memory_offset`, at `offset` in this range. Returns the address.
  result<void*> map(std::size_t offset, const physical_allocation& memory, std::size_t memory_offset, std::size_t size);
  /// Maps the whole of `memory` at `offset`.
  result<void*> map(std::size_t offset, const physical_allocation& memory) {
    return map(offset, memory, 0, memory.size());
  }
  /// Maps a multicast object like an allocation.
  result<void*> map(std::size_t offset, const multicast_object& object, std::size_t object_offset, std::size_t size);
  /// map() then set_access() over the new mapping; on any failure nothing stays mapped.
  result<void*> map_and_grant(std::size_t offset, const physical_allocation& memory, std::size_t memory_offset,
                              std::size_t size, access_list grants);

  /// map_and_grant of the whole of `memory` at `offset`.
  result<void*> map_and_grant(std::size_t offset, const physical_allocation& memory, access_list grants) {
    return map_and_grant(offset, memory, 0, memory.size(), grants);
  }

  /// Unmaps whole mappings covering exactly [offset, offset + size).
  status unmap(std::size_t offset, std::size_t size);

  /// Grants access over whole mappings covering exactly [offset, offset + size).
  status set_access(std::size_t offset, std::size_t size, access_list grants);
  status set_access(std::size_t offset, std::size_t size, const access_descriptor* grants, std::size_t count) {
    return set_access(offset, size, access_list(grants, count));
  }

  /// Frees the range now. Refuses with errc::busy while mappings remain (unmap them first).
  status release() noexcept;

  bool valid() const noexcept { return state_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }
  void* address() const noexcept;
  std::size_t size() const noexcept;
  std::size_t mapping_count() const noexcept;
  /// address() + offset, as a typed pointer.
  template <class T = void>
  T* at(std::size_t offset) const noexcept {
    return reinterpret_cast<T*>(static_cast<unsigned char*>(address()) + offset);
  }

 private:
  using state_owner = std::unique_ptr<detail::reservation_state, detail::reservation_recycler>;
  explicit address_reservation(state_owner state) noexcept;
  state_owner state_;
};

/// The access `where` has at `address` (which must be mapped).
result<access> query_access(location where, const void* address);

}  // namespace pvmm
