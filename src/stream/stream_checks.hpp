// The check every stream-ordered operation makes of the stream it is given (streams, events, pools).
#pragma once

#include <pvmm/stream.hpp>

#include "core/device.hpp"
#include "core/operation.hpp"

namespace pvmm::detail {

/// The error for an empty (0) stream reference.
[[gnu::cold]] error empty_stream(const operation& op);
/// A stream reference is usable: nonzero (streams are explicit) and of a device that exists. Inline: every
/// stream-ordered call (pool allocate and free) makes it, and it costs a load and two compares.
inline status check_stream(const stream_ref& s, const operation& op) {
  if (s.native_handle().value == 0) return empty_stream(op);
  return check_location(location::device(s.device()), op);
}

}  // namespace pvmm::detail
