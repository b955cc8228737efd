// pvmm/pinned.hpp - page-locked (pinned) host memory: allocations, and registration of memory the program already
// has, each with the device pointer devices use (cuMemHostAlloc / cuMemHostRegister, hipHostMalloc /
// hipHostRegister; the host backend locks pages with mlock). Copies from pinned memory run asynchronously with the
// host; a pageable source is read before copy_async returns.
//
// Portable semantics (every backend):
// - device_pointer(d) is where device d reaches the memory; it may differ from the host pointer
//   (capabilities.host_memory.device_pointer_is_host_pointer);
// - a pinned allocation counts as registered memory: registering a range that overlaps a registration or a live
//   pinned_allocation is errc::already_registered, before any driver call, the message naming which it overlaps
//   and its range (CUDA's driver would call a pinned allocation CUDA_ERROR_INVALID_VALUE; mlock would lock it again);
// - registering a range with a page where nothing is mapped, or mapped PROT_NONE, is errc::invalid_argument; so is
//   a range that overlaps memory pvmm made for devices (an address reservation, a pool or managed allocation),
//   the message naming it and its range (query_pointer tells the kinds apart);
// - unregistering an address that does not start a registered range is errc::not_registered; unregistering memory
//   the program already unmapped succeeds and forgets the range (as cuMemHostUnregister does);
// - a lock the system refuses (RLIMIT_MEMLOCK) is errc::out_of_memory, with a hint naming the limit.
//
// Threading: register_host_memory and unregister_host_memory may be called from any thread (the registry is
// locked: two threads registering overlapping ranges get one success and one errc::already_registered). One
// pinned_allocation or host_registration's const members (data, size, device_pointer) may be called from several
// threads at once; release, moving and destroying it may not overlap any other use of it.
#pragma once

#include <cstddef>

#include <pvmm/detail/unique_owner.hpp>
#include <pvmm/error.hpp>
#include <pvmm/types.hpp>

namespace pvmm {

/// How page-locked memory is made.
struct pinned_options {
  bool portable = true;         ///< page-locked for every device's context, not only the current one
  bool mapped = true;           ///< devices may use it through device_pointer() (capabilities.host_memory.mapped)
  bool write_combined = false;  ///< faster for the device to read, slow for the host to read (allocations only)
};

namespace detail {
/// What a page-locked owner keeps besides its region: whether devices reach it through a device pointer.
struct page_lock {
  bool mapped_ = false;
};
}  // namespace detail

/// Owns one page-locked allocation. Move-only; the destructor frees it.
class pinned_allocation
    : public detail::unique_owner<pinned_allocation, detail::region_holder<pinned_allocation, detail::page_lock>> {
 public:
  static result<pinned_allocation> create(std::size_t size, const pinned_options& options = {});

  pinned_allocation() noexcept = default;

  /// Frees it now; errc::already_released when empty. A failed free leaves the owner as it was (retry, or let
  /// the destructor free it).
  status release() noexcept;
  /// Where device `device` reaches this memory (options.mapped).
  result<void*> device_pointer(int device) const;

 private:
  friend unique_owner;
  pinned_allocation(void* data, std::size_t size, bool mapped) noexcept
      : unique_owner(std::in_place, data, size, detail::page_lock{mapped}) {}
  static void teardown(holder& region) noexcept;
};

/// Page-locks [pointer, pointer + size) of memory the program owns (unregister_host_memory undoes it); the owner
/// form is host_registration. write_combined is refused (errc::invalid_argument): it is a property of allocations.
status register_host_memory(void* pointer, std::size_t size, const pinned_options& options = {});
status unregister_host_memory(void* pointer);

/// Owns one registration: unregisters on destruction. Move-only. The memory stays the program's.
class host_registration
    : public detail::unique_owner<host_registration, detail::region_holder<host_registration, detail::page_lock>> {
 public:
  static result<host_registration> create(void* pointer, std::size_t size, const pinned_options& options = {});

  host_registration() noexcept = default;

  /// Unregisters now; errc::already_released when empty. A failure that keeps the range registered leaves the
  /// owner as it was (retry, or let the destructor do it).
  status release() noexcept;
  result<void*> device_pointer(int device) const;

 private:
  friend unique_owner;
  host_registration(void* data, std::size_t size, bool mapped) noexcept
      : unique_owner(std::in_place, data, size, detail::page_lock{mapped}) {}
  static void teardown(holder& region) noexcept;
};

}  // namespace pvmm
