// Backend feature "managed": managed (unified) memory. The neutral layer has validated every argument (the range
// is inside one managed allocation, locations exist and the capability for them is present).
#pragma once

#include <cstddef>

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

}  // namespace pvmm::detail::backend
