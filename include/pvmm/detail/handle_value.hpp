// pvmm/detail/handle_value.hpp - what every backend handle type is: the backend's handle (CUstream, a memfd, ...)
// carried as an integer, compared by value, written once. Each kind is its own type deriving from
// handle_value<itself> (stream_handle, event_handle, allocation_handle, multicast_handle, pool_handle), so handles
// of two kinds neither compare nor convert. They stay aggregates: `stream_handle{v}` and `stream_handle{}` work.
#pragma once

#include <cstdint>

namespace pvmm::detail {

template <class Kind>
struct handle_value {
  std::uint64_t value = 0;
  friend constexpr bool operator==(Kind a, Kind b) noexcept { return a.value == b.value; }
  friend constexpr bool operator!=(Kind a, Kind b) noexcept { return a.value != b.value; }
};

}  // namespace pvmm::detail
