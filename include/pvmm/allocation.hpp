// pvmm/allocation.hpp - physical memory: create, read back, retain from an address, export, import.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include <pvmm/detail/unique_owner.hpp>
#include <pvmm/error.hpp>
#include <pvmm/owned_fd.hpp>
#include <pvmm/types.hpp>

namespace pvmm {

namespace detail {
struct allocation_state;
struct owner_access;
}  // namespace detail

/// Owns one reference to physical memory (the creation reference, a retained one, or an imported one).
///
/// Lifetime: the memory lives while an owner or a mapping refers to it. release() (or the destructor)
/// drops this owner's reference; mappings of the memory stay valid until they are unmapped.
/// Move-only; a moved-from or released owner is empty and reports errc::already_released.
///
/// Exporter death: an import holds its own reference. Once import_posix_fd has returned (or once the fd has arrived:
/// the fd holds the memory meanwhile), the exporting process may release its allocation, exit or be killed, and the
/// importer's mappings stay readable and writable, with the data as the exporter left it, until the importer
/// releases them (without error). Host backend: pinned by the suite (sharing/exporter_death.cpp). CUDA and HIP on
/// NVIDIA: measured the same on driver 580 (H100) by tools/probes/exporter_death, imported before the death and after
/// it (the fd in flight); HIP on AMD is not measured. A fabric import does not keep memory alive (import_fabric).
///
/// Threading: create, import and retain may run on any thread. The const members (size, properties, export)
/// of one owner may be called from several threads at once; release, moving and destruction of one owner
/// may not overlap any other use of that owner. Different owners of the same memory are independent.
class physical_allocation : detail::move_only {
 public:
  physical_allocation() noexcept = default;  ///< empty (the private constructor below hides the implicit one)
  /// Physical memory of `size` bytes (a nonzero multiple of query_granularity(properties).minimum).
  static result<physical_allocation> create(std::size_t size, const allocation_properties& properties);

  /// A new reference to the allocation mapped at `address` (anywhere inside a mapping). Released once,
  /// like any owner, independently of the creation reference.
  static result<physical_allocation> retain(const void* address);

  /// Imports an allocation exported as a POSIX fd. The fd is borrowed: the caller still owns it and may
  /// close it right after; the import holds its own reference. `size` is the exported allocation's size.
  static result<physical_allocation> import_posix_fd(int fd, std::size_t size);

  /// Imports an allocation exported as a fabric handle. The handle does not keep the memory alive: the
  /// exporter must keep its allocation until the importer has released its import.
  static result<physical_allocation> import_fabric(const fabric_handle& handle, std::size_t size);

  /// A POSIX fd naming this allocation; needs handle_types::posix_fd in the properties it was created with.
  /// The fd keeps the memory alive until it and every import of it are closed/released.
  result<owned_fd> export_posix_fd() const;

  /// A fabric handle naming this allocation; needs handle_types::fabric at creation.
  result<fabric_handle> export_fabric() const;

  /// The properties as the backend reports them for this allocation, with one rule for the location on every
  /// backend: memory created in this process at location::host() reads back as host() (CUDA's driver says
  /// host_numa(0)); host_numa(n) and device(d) read back as created. An import (or a retained import) reads
  /// back what the driver reports, which for host memory may be host() or host_numa(n).
  result<allocation_properties> properties() const;

  /// Drops this owner's reference now. Fails with already_released when empty.
  status release() noexcept;

  bool valid() const noexcept { return state_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }
  std::size_t size() const noexcept;
  /// The backend's own handle (CUmemGenericAllocationHandle, hipMemGenericAllocationHandle_t, memfd);
  /// {0} when empty. pvmm still owns it: do not release it.
  allocation_handle native_handle() const noexcept;

 private:
  explicit physical_allocation(std::shared_ptr<detail::allocation_state> state) noexcept;
  friend struct detail::owner_access;  // the neutral layer's view of the state shared with mappings
  std::shared_ptr<detail::allocation_state> state_;
};

}  // namespace pvmm
