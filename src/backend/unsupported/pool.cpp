// Feature "pool" for a backend that lacks it (hip, until its pools are written): no device reports pools, so the
// neutral layer answers not_supported before reaching these.
#include "backend/pool.hpp"
#include "backend/unsupported/unsupported.hpp"

namespace pvmm::detail::backend {

result<capabilities::pool_features> pool_capabilities(int) { return capabilities::pool_features{}; }
result<pool_handle> create_pool(const pool_properties&) { return unsupported_feature("memory pools"); }
result<pool_handle> default_pool(int) { return unsupported_feature("memory pools"); }
status destroy_pool(pool_handle) { return unsupported_feature("memory pools"); }
status set_pool_attribute(pool_handle, pool_attribute, std::uint64_t) { return unsupported_feature("memory pools"); }
result<std::uint64_t> get_pool_attribute(pool_handle, pool_attribute) { return unsupported_feature("memory pools"); }
status trim_pool(pool_handle, std::size_t) { return unsupported_feature("memory pools"); }
status set_pool_access(pool_handle, const access_descriptor*, std::size_t) {
  return unsupported_feature("memory pools");
}
result<access> get_pool_access(pool_handle, location) { return unsupported_feature("memory pools"); }
result<void*> allocate_from_pool(pool_handle, std::size_t, stream_handle, int) {
  return unsupported_feature("memory pools");
}
status free_to_pool(void*, stream_handle, int) { return unsupported_feature("memory pools"); }

}  // namespace pvmm::detail::backend
