// The one check of a copy's two ranges against what pvmm knows, made by every copy entry point (stream_ref::
// copy_async, testing::copy_to_mapping / copy_from_mapping, and through them the C and Python faces) on every
// backend, before anything is enqueued.
#pragma once

#include <cstddef>

#include "core/operation.hpp"

namespace pvmm::detail {

enum class copy_end { source, destination };

/// [address, address + size) (size > 0) is one end of a copy run by `device`:
/// - null: errc::invalid_argument; a range past the end of the address space: errc::out_of_range;
/// - inside a range pvmm made (a reservation, a pool allocation, managed, pinned or registered memory): it must end
///   inside that range, or, from a reservation, inside reservations that follow it without a gap (a growable
///   buffer grown in place owns several) (errc::out_of_range); in a reservation every byte must be mapped
///   (errc::not_mapped) and
///   `device` must have read access to the source's mappings and read_write to the destination's
///   (errc::not_permitted);
/// - running from memory pvmm does not know into a range it made: errc::out_of_range;
/// - memory pvmm does not know: its pages must all be mapped in this process (mincore), on every backend, else
///   errc::not_mapped - a GPU runtime's own device memory is covered by the address space unified addressing
///   reserves, so only addresses nothing maps (garbage, a host range past its end) are refused, never handed to a
///   driver that would fault on them. Whether unknown memory is writable is not known here.
status check_copy_range(const void* address, std::size_t size, copy_end end, int device, const operation& op);

}  // namespace pvmm::detail
