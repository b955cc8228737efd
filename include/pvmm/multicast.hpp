// pvmm/multicast.hpp - multicast objects (NVLink SHARP): one address that reaches memory on every team device.
//
// Backends without multicast (host, hip) answer errc::not_supported. On CUDA, check
// query_device(d).capabilities.multicast.supported first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include <pvmm/allocation.hpp>
#include <pvmm/detail/unique_owner.hpp>
#include <pvmm/error.hpp>
#include <pvmm/owned_fd.hpp>
#include <pvmm/types.hpp>

namespace pvmm {

struct multicast_properties {
  unsigned team_size = 0;                        ///< number of devices that will be added
  std::size_t size = 0;                          ///< multiple of multicast_granularity().minimum
  handle_types exportable = handle_types::none;  ///< how it may be shared with other processes
};

/// Granularity of multicast objects with these properties.
result<granularity> multicast_granularity(const multicast_properties& properties);

/// Owns one multicast object. Move-only. Map it with address_reservation::map (like an allocation).
/// Lifetime as physical_allocation: the object lives while an owner or a mapping refers to it.
///
/// Threading: create and import may run on any thread. The const members (size, export, native_handle) of one
/// owner may be called from several threads at once; add_device, bind_memory and unbind change the team and may
/// not overlap each other on one object; release, moving and destruction may not overlap any other use of it.
class multicast_object : detail::move_only {
 public:
  multicast_object() noexcept = default;  ///< empty (the private constructor below hides the implicit one)
  static result<multicast_object> create(const multicast_properties& properties);
  static result<multicast_object> import_posix_fd(int fd, std::size_t size);
  static result<multicast_object> import_fabric(const fabric_handle& handle, std::size_t size);

  /// Adds a device to the team; every device must be added before memory is bound on any.
  status add_device(int ordinal);
  /// Binds `size` bytes of `memory` from `memory_offset` at `offset` of the object.
  status bind_memory(std::size_t offset, const physical_allocation& memory, std::size_t memory_offset,
                     std::size_t size);
  /// Unbinds the memory of `ordinal` at `offset` for `size`.
  status unbind(int ordinal, std::size_t offset, std::size_t size);

  result<owned_fd> export_posix_fd() const;
  result<fabric_handle> export_fabric() const;
  status release() noexcept;

  bool valid() const noexcept { return state_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }
  std::size_t size() const noexcept;
  /// The backend's own handle ({0} when empty). pvmm still owns it.
  multicast_handle native_handle() const noexcept;

 private:
  explicit multicast_object(std::shared_ptr<detail::allocation_state> state) noexcept;
  friend struct detail::owner_access;
  std::shared_ptr<detail::allocation_state> state_;
};

}  // namespace pvmm
