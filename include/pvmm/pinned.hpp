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
// Threading: any thread; destroying or moving an owner may not overlap its use.
#pragma once

#include <cstddef>

#include <pvmm/error.hpp>
#include <pvmm/types.hpp>

namespace pvmm {

/// How page-locked memory is made.
struct pinned_options {
  bool portable = true;         ///< page-locked for every device's context, not only the current one
  bool mapped = true;           ///< devices may use it through device_pointer() (capabilities.host_memory.mapped)
  bool write_combined = false;  ///< faster for the device to read, slow for the host to read (allocations only)
};

/// Owns one page-locked allocation. Move-only; the destructor frees it.
class pinned_allocation {
 public:
  static result<pinned_allocation> create(std::size_t size, const pinned_options& options = {});

  pinned_allocation() noexcept = default;
  pinned_allocation(pinned_allocation&& other) noexcept;
  pinned_allocation& operator=(pinned_allocation&& other) noexcept;
  pinned_allocation(const pinned_allocation&) = delete;
  pinned_allocation& operator=(const pinned_allocation&) = delete;
  ~pinned_allocation();

  status release() noexcept;
  /// Where device `device` reaches this memory (options.mapped).
  result<void*> device_pointer(int device) const;

  void* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  bool valid() const noexcept { return data_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }

 private:
  pinned_allocation(void* data, std::size_t size, bool mapped) noexcept : data_(data), size_(size), mapped_(mapped) {}
  void* data_ = nullptr;
  std::size_t size_ = 0;
  bool mapped_ = false;
};

/// Page-locks [pointer, pointer + size) of memory the program owns (unregister_host_memory undoes it); the owner
/// form is host_registration. write_combined is refused (errc::invalid_argument): it is a property of allocations.
status register_host_memory(void* pointer, std::size_t size, const pinned_options& options = {});
status unregister_host_memory(void* pointer);

/// Owns one registration: unregisters on destruction. Move-only. The memory stays the program's.
class host_registration {
 public:
  static result<host_registration> create(void* pointer, std::size_t size, const pinned_options& options = {});

  host_registration() noexcept = default;
  host_registration(host_registration&& other) noexcept;
  host_registration& operator=(host_registration&& other) noexcept;
  host_registration(const host_registration&) = delete;
  host_registration& operator=(const host_registration&) = delete;
  ~host_registration();

  status release() noexcept;
  result<void*> device_pointer(int device) const;

  void* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  bool valid() const noexcept { return data_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }

 private:
  host_registration(void* data, std::size_t size, bool mapped) noexcept : data_(data), size_(size), mapped_(mapped) {}
  void* data_ = nullptr;
  std::size_t size_ = 0;
  bool mapped_ = false;
};

}  // namespace pvmm
