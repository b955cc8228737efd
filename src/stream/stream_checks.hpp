// The check every stream-ordered operation makes of the stream it is given (streams, events, pools).
#pragma once

#include <pvmm/stream.hpp>

#include "core/operation.hpp"

namespace pvmm::detail {

/// A stream reference is usable: nonzero (streams are explicit) and of a device that exists.
status check_stream(const stream_ref& s, const operation& op);

}  // namespace pvmm::detail
