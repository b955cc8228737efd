// pvmm/managed.hpp - managed (unified) memory: one address valid on the host and on devices, with advice about
// where its pages should live, prefetches in stream order, and the range attributes that read both back
// (cuMemAllocManaged, cuMemAdvise, cuMemPrefetchAsync, cuMemRangeGetAttribute; hipMallocManaged and friends; the
// host backend keeps advice and prefetch per page and applies them with madvise and mbind).
//
// Portable semantics (every backend):
// - advice, prefetch and queries take ranges inside one managed allocation pvmm made (anything else is
//   errc::invalid_argument, or errc::out_of_range where the range runs past its allocation);
// - advice, prefetch and queries work on whole CPU pages: a range that does not start or end on a page boundary is
//   rounded out (start down, end up) to the pages it touches, as cuMemAdvise, cuMemPrefetchAsync and hipMemAdvise
//   document; so advice on [base + 100, +5000) reads back on all of the first two pages, and a query of a few
//   bytes answers for the page holding them;
// - attach_async takes one whole managed allocation (pointer its data(), size its size()); part of one is
//   errc::invalid_argument naming the allocation, as a stream attaches whole allocations only;
// - locations are device(n), host() and, where capabilities.managed.host_numa_locations, host_numa(n);
// - a range attribute is the pages' common value: read_mostly only if every page is; a preferred or last-prefetch
//   location only if every page has the same one; accessed_by lists the processors set for every page;
// - last_prefetch_location is the location last asked for (no driver promises when a prefetch completes);
// - a host NUMA node advised as preferred location takes effect but reads back as none (CUDA 13.0's driver reports
//   none for it; measured on driver 580), on every backend;
// - prefetching to a device needs capabilities.managed.concurrent_access.
//
// Threading: advise, prefetch_async, query_range and attach_async may be called from any thread, also on one
// allocation at once (the drivers order them as they arrive). One managed_allocation's const members (data,
// size, valid) may be called from several threads at once; release, moving and destroying it may not overlap any
// other use of it, nor of its memory by advice or prefetches.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include <pvmm/detail/unique_owner.hpp>
#include <pvmm/error.hpp>
#include <pvmm/stream.hpp>
#include <pvmm/types.hpp>

namespace pvmm {

/// Who may use a managed allocation first (cuMemAttach*): every stream (global), the host only (host), or one
/// stream once attached (single; attach_async). HIP accepts the modes and treats them alike.
enum class attach_mode { global, host, single };

/// Owns one managed allocation. Move-only; the destructor frees it (the device must be done with it).
class managed_allocation : public detail::unique_owner<managed_allocation, detail::region_holder<managed_allocation>> {
 public:
  /// `size` bytes (> 0; rounded up to the page size) of managed memory. attach_mode::single is not a creation
  /// mode (errc::invalid_argument): create with host and attach to a stream.
  static result<managed_allocation> create(std::size_t size, attach_mode mode = attach_mode::global);

  managed_allocation() noexcept = default;

  /// Frees it now; errc::already_released when empty. A failed free leaves the owner as it was (retry, or let
  /// the destructor free it).
  status release() noexcept;

 private:
  friend unique_owner;
  managed_allocation(void* data, std::size_t size) noexcept : unique_owner(std::in_place, data, size) {}
  static void teardown(holder& region) noexcept;
};

/// Advice about a managed range (cuMemAdvise). The set_/unset_ pairs undo each other.
enum class advice {
  set_read_mostly,  ///< pages are read far more than written: readers may keep copies
  unset_read_mostly,
  set_preferred_location,  ///< pages should live at `where`
  unset_preferred_location,
  set_accessed_by,  ///< `where` will use the pages: keep them mapped there
  unset_accessed_by,
};

/// Gives advice about [pointer, pointer + size). Read-mostly advice and unset_preferred_location take no location;
/// set_preferred_location and set/unset_accessed_by name their processor (without one: errc::invalid_argument;
/// there is no default device).
status advise(const void* pointer, std::size_t size, advice what);
status advise(const void* pointer, std::size_t size, advice what, location where);

/// Moves [pointer, pointer + size) to `to` in `on`'s order.
status prefetch_async(const void* pointer, std::size_t size, location to, stream_ref on);

/// What advice and prefetches a managed range holds, aggregated over its pages as the header says.
struct range_attributes {
  bool read_mostly = false;
  std::optional<location> preferred_location;  ///< none: unset on some page, or the pages differ
  std::vector<location> accessed_by;           ///< processors every page is advised accessed by
  std::optional<location> last_prefetch_location;
};
result<range_attributes> query_range(const void* pointer, std::size_t size);

/// Attaches a whole managed allocation ([pointer, pointer + size) must be exactly one: its data() and size()) to a
/// stream in its order (cuStreamAttachMemAsync): single limits use to `on`'s work, host to the host, global to
/// everyone. HIP records nothing (its call does nothing).
status attach_async(const void* pointer, std::size_t size, attach_mode mode, stream_ref on);

}  // namespace pvmm
