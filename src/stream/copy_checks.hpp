// The check every copy entry point makes of both of its ranges before anything is enqueued (invariant 31).
#pragma once

#include <cstddef>

#include <pvmm/error.hpp>

#include "core/operation.hpp"

namespace pvmm::detail {

/// Whether a copy end is read or written.
enum class copy_end { source, destination };

/// Checks [pointer, pointer + size) (size > 0, pointer not null) against what pvmm knows: no wrap past the end of
/// the address space (out_of_range); memory pvmm made lies wholly inside its range (out_of_range); a reservation's
/// part is mapped throughout (not_mapped). On the host backend, whose worker thread runs the copy as a memcpy, the
/// kernel's map (/proc/self/maps) must also cover the range readable (source) or writable (destination), for memory
/// pvmm did not make and for reservations (whose access set_access may have narrowed): not_mapped, or
/// not_permitted for a read-only destination or an inaccessible range. Pool, pinned and managed memory pvmm made is
/// read-write wherever it lies inside its range.
status check_copy_range(const void* pointer, std::size_t size, copy_end end, const operation& op);

}  // namespace pvmm::detail
