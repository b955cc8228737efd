// pvmm's opaque handles (stream_handle, event_handle, pool_handle: a 64-bit value) and a native API's pointer
// handles (CUstream, hipMemPool_t, ...), converted one way for every backend and handle type.
#pragma once

#include <cstdint>

namespace pvmm::detail::backend {

/// The native handle `h` carries.
template <class Native, class Handle>
Native native_as(Handle h) noexcept {
  return reinterpret_cast<Native>(static_cast<std::uintptr_t>(h.value));
}
/// pvmm's handle carrying native handle `p`.
template <class Handle, class Native>
Handle handle_of(Native p) noexcept {
  return Handle{static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p))};
}

}  // namespace pvmm::detail::backend
