// Backend feature "managed": managed (unified) memory. The neutral layer has validated every argument (the range
// is inside one managed allocation, locations exist and the capability for them is present).
#pragma once

#include <cstddef>
#include <optional>

#include <pvmm/managed.hpp>

#include "backend/device.hpp"

namespace pvmm::detail::backend {

result<capabilities::managed_features> managed_capabilities(int ordinal);
result<void*> allocate_managed(std::size_t size, attach_mode mode);  // size: a multiple of the page size
status free_managed(void* pointer);
status advise_managed(const void* pointer, std::size_t size, advice what, location where);
status prefetch_managed(const void* pointer, std::size_t size, location to, stream_handle s, int device);
result<range_attributes> query_managed_range(const void* pointer, std::size_t size);
// [pointer, pointer + size) is one whole managed allocation (the neutral layer refuses part of one).
status attach_managed(stream_handle s, int device, const void* pointer, std::size_t size, attach_mode mode);

// Translations the GPU backends share (each passes its driver's values).
/// The driver's value for advice `a` from `table`, its advice values in pvmm's order (table[0] past the end: the
/// neutral layer refused unknown values).
template <class Native, std::size_t N>
Native native_advice(const Native (&table)[N], advice a) {
  static_assert(N == static_cast<std::size_t>(advice::unset_accessed_by) + 1, "one entry per advice");
  const auto i = static_cast<std::size_t>(a);
  return i < N ? table[i] : table[0];
}
/// The device-ordinal ABI's name of a location: the device's ordinal, else `host` (host NUMA nodes are refused by the
/// neutral layer there).
inline int legacy_ordinal(location l, int host) { return l.type == location::kind::device ? l.id : host; }
/// A device-ordinal attribute value (`host` the host, another negative value none) as a location.
inline std::optional<location> from_legacy_ordinal(int v, int host) {
  if (v == host) return location::host();
  if (v >= 0) return location::device(v);
  return std::nullopt;
}

}  // namespace pvmm::detail::backend
