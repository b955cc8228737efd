// Backend feature "stream": streams, events, host functions and async copies.
#pragma once

#include <cstddef>
#include <cstdint>

#include <pvmm/stream.hpp>

#include "backend/device.hpp"

namespace pvmm::detail::backend {

result<stream_handle> create_stream(int device);
status destroy_stream(stream_handle s);  // after the neutral layer synchronized it
status synchronize_stream(stream_handle s, int device);
result<bool> query_stream(stream_handle s, int device);
status wait_event(stream_handle s, int device, event_handle e);
status launch_host_function(stream_handle s, int device, void (*fn)(void*), void* data);
/// Whether `s` is capturing a graph: work enqueued now runs at every launch of that graph, not once. False where
/// the backend has no graphs (host) or the driver cannot tell.
result<bool> stream_capturing(stream_handle s, int device);
/// How the source of a copy is read, decided once in the neutral layer from the range registry.
enum class source_read : std::uint8_t {
  /// Pageable host memory (memory pvmm did not make), on a backend that stages it (traits.copy_stages_pageable):
  /// the caller may reuse it when the call returns, so the backend reads it before returning.
  stage,
  /// Memory pvmm made (VMM mappings, pool, managed, pinned and registered memory) is read when the copy runs, in
  /// stream order; so is every source on a backend whose driver tells pageable memory apart itself.
  in_stream_order,
};
status copy_async(void* destination, const void* source, std::size_t size, stream_handle s, int device,
                  source_read read);

result<event_handle> create_event(int device);
status destroy_event(event_handle e);
status record_event(event_handle e, stream_handle s, int device);
status synchronize_event(event_handle e);
result<bool> query_event(event_handle e);

}  // namespace pvmm::detail::backend
