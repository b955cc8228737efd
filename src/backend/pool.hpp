// Backend feature "pool": stream-ordered memory pools.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include <pvmm/memory_pool.hpp>

#include "backend/device.hpp"

namespace pvmm::detail::backend {

result<capabilities::pool_features> pool_capabilities(int ordinal);

/// Readable and settable pool attributes; the values are the drivers' (bytes, or 0/1 for the reuse flags).
enum class pool_attribute {
  release_threshold,
  reuse_follow_event_dependencies,
  reuse_opportunistic,
  reuse_internal_dependencies,
  reserved_current,
  reserved_high,  // set: any value resets the mark
  used_current,
  used_high,  // set: any value resets the mark
};

result<pool_handle> create_pool(const pool_properties& properties);  // validated; attributes set separately
result<pool_handle> default_pool(int device);
status destroy_pool(pool_handle pool);  // no allocation of it is live
status set_pool_attribute(pool_handle pool, pool_attribute which, std::uint64_t value);
result<std::uint64_t> get_pool_attribute(pool_handle pool, pool_attribute which);
status trim_pool(pool_handle pool, std::size_t keep);
status set_pool_access(pool_handle pool, const access_descriptor* grants, std::size_t count);
result<access> get_pool_access(pool_handle pool, location where);
result<void*> allocate_from_pool(pool_handle pool, std::size_t size, stream_handle s, int device);
status free_to_pool(void* pointer, stream_handle s, int device);  // also an imported pointer

// Sharing (pools created with posix_fd; checked by the neutral layer: exportable, live, the right pool).
using pool_pointer_record = std::array<std::uint8_t, 64>;
result<owned_fd> export_pool_posix_fd(pool_handle pool);       // a descriptor the caller owns
result<pool_handle> import_pool_posix_fd(int fd, int device);  // fd stays the caller's
result<pool_pointer_record> export_pool_pointer(pool_handle pool, const void* pointer);
result<void*> import_pool_pointer(pool_handle pool, const pool_pointer_record& record, std::size_t size);

/// Whether a pool attribute is a flag (an int in the native APIs: the reuse policies) rather than a 64-bit count.
inline bool is_flag(pool_attribute a) {
  return a == pool_attribute::reuse_follow_event_dependencies || a == pool_attribute::reuse_opportunistic ||
         a == pool_attribute::reuse_internal_dependencies;
}

}  // namespace pvmm::detail::backend
