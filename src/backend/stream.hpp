// Backend feature "stream": streams, events, host functions and async copies.
#pragma once

#include <cstddef>

#include <pvmm/stream.hpp>

#include "backend/device.hpp"

namespace pvmm::detail::backend {

result<stream_handle> create_stream(int device);
status destroy_stream(stream_handle s);  // after the neutral layer synchronized it
status synchronize_stream(stream_handle s, int device);
result<bool> query_stream(stream_handle s, int device);
status wait_event(stream_handle s, int device, event_handle e);
status launch_host_function(stream_handle s, int device, void (*fn)(void*), void* data);
/// `stage_source`: the source is pageable host memory the caller may reuse when the call returns.
status copy_async(void* destination, const void* source, std::size_t size, stream_handle s, int device,
                  bool stage_source);

result<event_handle> create_event(int device);
status destroy_event(event_handle e);
status record_event(event_handle e, stream_handle s, int device);
status synchronize_event(event_handle e);
result<bool> query_event(event_handle e);

}  // namespace pvmm::detail::backend
