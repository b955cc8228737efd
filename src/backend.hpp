// The interface every backend implements: one translation of each neutral operation into its API.
// Argument validation, bookkeeping and error context live in the neutral layer (src/*.cpp); a backend
// reports native errors (code, native name, detail, hint) and the neutral layer adds operation/arguments.
// Exactly one backend library is linked into a build, so these are plain functions (no virtual dispatch).
#pragma once

#include <cstddef>
#include <cstdint>

#include <pvmm/error.hpp>
#include <pvmm/types.hpp>

namespace pvmm::detail {

using native_handle = std::uint64_t;

struct multicast_request {
  unsigned team_size = 0;
  std::size_t size = 0;
  handle_types exportable = handle_types::none;
};

namespace backend {

backend_info info();
result<int> device_count();
result<device_info> device(int ordinal);  // ordinal already validated
result<memory_info> memory(int ordinal);
result<granularity> allocation_granularity(const allocation_properties& properties);
/// Size/alignment unit of address reservations (covers every device's granularity).
result<std::size_t> reservation_granularity();

result<native_handle> create(const allocation_properties& properties, std::size_t size);
status release(native_handle handle);
result<allocation_properties> properties(native_handle handle);

result<void*> reserve(std::size_t size, std::size_t alignment, const void* hint);
status free_reservation(void* address, std::size_t size);
status map(void* address, std::size_t size, native_handle handle, std::size_t handle_offset);
status unmap(void* address, std::size_t size);
status set_access(void* address, std::size_t size, const access_descriptor* grants, std::size_t count);
/// Whether one set_access call may span several adjacent mappings (HIP: one call per mapping).
bool set_access_spans_mappings() noexcept;
result<access> get_access(location where, const void* address);

result<int> export_posix_fd(native_handle handle);
result<fabric_handle> export_fabric(native_handle handle);
result<native_handle> import_posix_fd(int fd, std::size_t size);
result<native_handle> import_fabric(const fabric_handle& handle, std::size_t size);

result<granularity> multicast_granularity(const multicast_request& request);
result<native_handle> multicast_create(const multicast_request& request);
status multicast_add_device(native_handle object, int ordinal);
status multicast_bind(native_handle object, std::size_t offset, native_handle memory, std::size_t memory_offset,
                      std::size_t size);
status multicast_unbind(native_handle object, int ordinal, std::size_t offset, std::size_t size);

}  // namespace backend
}  // namespace pvmm::detail

namespace pvmm::detail::backend {
// Data movement for tests and self-checks (the user's own runtime does this in real programs).
// `device` < 0: any device that has access to the mapped side.
status copy_to_mapping(void* destination, const void* source, std::size_t size, int device);
status copy_from_mapping(void* destination, const void* source, std::size_t size, int device);
/// Whether a write at `address` by device 0 faults; not_supported where probing would be fatal.
result<bool> write_faults(void* address);
}  // namespace pvmm::detail::backend
