// pvmm/pointer.hpp - "what is this address": the kind of memory pvmm made there, its range, its device and the
// options it was made with, as cuPointerGetAttributes / hipPointerGetAttributes answer for the drivers' memory.
//
// Portable semantics (every backend):
// - the answer comes from pvmm's own record of the memory it made (no driver call), so it is the same on every
//   backend: an address inside an address_reservation (mapped or not), a pool allocation, a managed allocation, a
//   pinned_allocation or a registered host range answers that kind with the whole range pvmm made (base, size);
// - memory pvmm did not make (malloc, the stack, another library's device memory, memory already given back) is
//   memory_kind::none with base nullptr, size 0 and device -1: not an error;
// - a null pointer is errc::invalid_argument;
// - one past the end of a range answers what lies there (none, or the next range).
//
// Threading: any thread. An answer describes the memory when it was given: a range another thread gives back
// meanwhile is none from then on.
#pragma once

#include <cstddef>

#include <pvmm/error.hpp>
#include <pvmm/managed.hpp>
#include <pvmm/pinned.hpp>

namespace pvmm {

/// The kinds of memory pvmm makes.
enum class memory_kind {
  none,        ///< not memory pvmm made (pageable host memory, for copy_async)
  device,      ///< an address_reservation: VMM mappings of physical memory (or not mapped yet)
  pool,        ///< an allocation from a memory_pool (allocate, allocate_async, import_pointer)
  managed,     ///< a managed_allocation
  pinned,      ///< a pinned_allocation (page-locked host memory pvmm allocated)
  registered,  ///< host memory the program owns, page-locked by register_host_memory / host_registration
};

/// What query_pointer answers.
struct pointer_attributes {
  memory_kind kind = memory_kind::none;
  void* base = nullptr;  ///< the start of the range pvmm made (a reservation, not one mapping of it)
  std::size_t size = 0;  ///< that range's size (managed memory: rounded up to the page size, as allocated)
  /// Whose memory it is: the device of a pool, of a mapping's physical memory, 0 for managed memory (allocated
  /// in device 0's context); -1 for host memory (pinned, registered, host-located physical memory) and where
  /// nothing is mapped.
  int device = -1;
  /// The host reaches the bytes through this pointer by the kind's own contract, on every backend: managed,
  /// pinned and registered memory. False for VMM mappings (host access is a grant: query_access) and pool
  /// allocations (the pool's memory belongs to its device), and for none.
  bool device_accessible_from_host = false;
  /// memory_kind::device: a mapping covers the address (VMM memory is usable only there).
  bool mapped = false;
  /// memory_kind::pinned and registered: the options it was page-locked with.
  pinned_options host_options{};
  /// memory_kind::managed: the attach mode last asked for (at creation, or by attach_async once enqueued).
  attach_mode attach = attach_mode::global;
};

/// Answers what `pointer` is (see the top of this header). errc::invalid_argument for nullptr.
result<pointer_attributes> query_pointer(const void* pointer);

}  // namespace pvmm
