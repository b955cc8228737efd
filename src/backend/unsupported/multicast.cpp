// Feature "multicast" for a backend that lacks it (host, hip).
#include "backend/multicast.hpp"
#include "backend/unsupported/unsupported.hpp"

namespace pvmm::detail::backend {
namespace {
constexpr const char* feature = "multicast objects";
constexpr const char* hint = "multicast needs NVLink SHARP: the cuda backend on NVSwitch systems";
}  // namespace

result<bool> multicast_capability(int) { return false; }
result<granularity> multicast_granularity(const multicast_request&) { return unsupported_feature(feature, hint); }
result<multicast_handle> multicast_create(const multicast_request&) { return unsupported_feature(feature, hint); }
status multicast_release(multicast_handle) { return unsupported_feature(feature, hint); }
status multicast_add_device(multicast_handle, int) { return unsupported_feature(feature, hint); }
status multicast_bind(multicast_handle, std::size_t, allocation_handle, std::size_t, std::size_t) {
  return unsupported_feature(feature, hint);
}
status multicast_unbind(multicast_handle, int, std::size_t, std::size_t) { return unsupported_feature(feature, hint); }
status multicast_map(void*, std::size_t, multicast_handle, std::size_t) { return unsupported_feature(feature, hint); }
result<int> multicast_export_posix_fd(multicast_handle) { return unsupported_feature(feature, hint); }
result<multicast_handle> multicast_import_posix_fd(int, std::size_t) { return unsupported_feature(feature, hint); }
result<fabric_handle> multicast_export_fabric(multicast_handle) { return unsupported_feature(feature, hint); }
result<multicast_handle> multicast_import_fabric(const fabric_handle&, std::size_t) {
  return unsupported_feature(feature, hint);
}

}  // namespace pvmm::detail::backend
