// physical_allocation and multicast_object: validation, reference counting, export and import.
#include <fcntl.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include <pvmm/allocation.hpp>
#include <pvmm/multicast.hpp>

#include "state.hpp"

namespace pvmm {
namespace detail {

allocation_state::~allocation_state() {
  (void)release_handle();  // a destructor cannot report; release() is the checked path
  --live_allocations;
}

status allocation_state::release_handle() {
  if (released) return {};
  released = true;
  return backend::release(handle);  // teardown: never fault-injected (see state.hpp)
}

namespace {

error released_owner(const char* operation, const char* what) {
  return make_error(errc::already_released, operation, "",
                    fmt::format("this {} is empty (released or moved from)", what));
}

/// Capability checks for creating memory with `p` (location already validated).
status check_requested_capabilities(const allocation_properties& p, const char* op, lazy_args args) {
  int ordinal = p.location.type == location::kind::device ? p.location.id : 0;
  auto caps = device_capabilities(ordinal);
  if (!caps) return in_operation(std::move(caps).error(), op, args);
  auto refuse = [&](const char* feature) {
    return make_error(
        errc::not_supported, op, args,
        fmt::format("the {} backend's device {} does not support {}", backend::info().name, ordinal, feature));
  };
  if (!caps->virtual_memory) return refuse("virtual memory management");
  if (p.location.type == location::kind::host && !caps->host_location) return refuse("host-located physical memory");
  if (p.location.type == location::kind::host_numa && !caps->host_numa_location)
    return refuse("host-NUMA-located physical memory");
  if (contains(p.exportable, handle_types::posix_fd) && !caps->posix_fd_handles) return refuse("POSIX fd handles");
  if (contains(p.exportable, handle_types::fabric) && !caps->fabric_handles) return refuse("fabric handles");
  if (p.gpu_direct_rdma && !caps->gpu_direct_rdma_with_vmm) return refuse("GPUDirect RDMA on VMM allocations");
  if (p.compression && !caps->compression) return refuse("generic compression");
  auto known = handle_types::posix_fd | handle_types::fabric;
  if ((static_cast<std::uint32_t>(p.exportable) & ~static_cast<std::uint32_t>(known)) != 0)
    return make_error(errc::invalid_argument, op, args,
                      fmt::format("unknown handle type bits {:#x}", static_cast<std::uint32_t>(p.exportable)));
  return {};
}

status check_size(std::size_t size, std::size_t unit, const char* what, const char* op, lazy_args args) {
  if (size == 0) return make_error(errc::invalid_size, op, args, fmt::format("{} is zero", what));
  if (size % unit != 0) {
    auto rounded = checked_round_up(size, unit);
    if (!rounded)
      return make_error(
          errc::out_of_memory, op, args,
          fmt::format("{} {:#x} rounded up to the granularity {:#x} exceeds what can be addressed", what, size, unit));
    return make_error(errc::unaligned, op, args,
                      fmt::format("{} {:#x} is not a multiple of the granularity {:#x}", what, size, unit),
                      fmt::format("round up to {:#x}", *rounded));
  }
  return {};
}

/// Wraps an imported handle: reads its properties back to learn its granularity; releases it on failure.
result<std::shared_ptr<allocation_state>> adopt_import(native_handle handle, std::size_t size,
                                                       allocation_state::kind what, const char* op, lazy_args args) {
  allocation_properties props;
  std::size_t unit = 1;
  if (what == allocation_state::kind::memory) {
    auto p = call_backend("properties", [&] { return backend::properties(handle); });
    auto g = p ? cached_granularity(*p) : result<granularity>(p.error());
    if (!g) {
      (void)backend::release(handle);  // rollback: never fault-injected
      return in_operation(std::move(g).error(), op, args);
    }
    props = *p;
    unit = g->minimum;
  }
  return std::make_shared<allocation_state>(handle, size, unit, props, what);
}

status check_import_fd(int fd, std::size_t size, const char* op, lazy_args args) {
  if (size == 0) return make_error(errc::invalid_size, op, args, "size is zero");
  if (fd < 0 || ::fcntl(fd, F_GETFD) < 0)
    return in_operation(errno_error(errc::invalid_handle, "fcntl(F_GETFD)", EBADF,
                                    fmt::format("fd {} is not an open file descriptor", fd)),
                        op, args);
  return {};
}

/// Imports an fd or a fabric handle as `what` (an allocation or a multicast object): one path for both.
result<std::shared_ptr<allocation_state>> import_fd_state(int fd, std::size_t size, allocation_state::kind what,
                                                          const char* op) {
  auto args = [&] { return fmt::format("fd={}, size={:#x}", fd, size); };
  if (auto ok = check_import_fd(fd, size, op, args); !ok) return std::move(ok).error();
  auto handle = call_backend("import_posix_fd", [&] { return backend::import_posix_fd(fd, size); });
  if (!handle) return in_operation(std::move(handle).error(), op, args);
  return adopt_import(*handle, size, what, op, args);
}

result<std::shared_ptr<allocation_state>> import_fabric_state(const fabric_handle& h, std::size_t size,
                                                              allocation_state::kind what, const char* op) {
  auto args = [&] { return fmt::format("size={:#x}", size); };
  if (size == 0) return make_error(errc::invalid_size, op, args, "size is zero");
  auto handle = call_backend("import_fabric", [&] { return backend::import_fabric(h, size); });
  if (!handle) return in_operation(std::move(handle).error(), op, args);
  return adopt_import(*handle, size, what, op, args);
}

}  // namespace
}  // namespace detail

using detail::call_backend;
using detail::in_operation;
using detail::make_error;

physical_allocation::physical_allocation() noexcept = default;
physical_allocation::physical_allocation(physical_allocation&&) noexcept = default;
physical_allocation& physical_allocation::operator=(physical_allocation&&) noexcept = default;
physical_allocation::~physical_allocation() = default;
physical_allocation::physical_allocation(std::shared_ptr<detail::allocation_state> state) noexcept
    : state_(std::move(state)) {}

std::size_t physical_allocation::size() const noexcept { return state_ ? state_->size : 0; }
std::uint64_t physical_allocation::native_handle() const noexcept { return state_ ? state_->handle : 0; }

result<physical_allocation> physical_allocation::create(const allocation_properties& properties, std::size_t size) {
  const char* op = "pvmm::physical_allocation::create";
  auto args = [&] { return fmt::format("properties={}, size={:#x}", detail::describe(properties), size); };
  if (auto ok = detail::check_location(properties.location, op, args); !ok) return std::move(ok).error();
  if (auto ok = detail::check_requested_capabilities(properties, op, args); !ok) return std::move(ok).error();
  auto g = detail::cached_granularity(properties);
  if (!g) return in_operation(std::move(g).error(), op, args);
  if (auto ok = detail::check_size(size, g->minimum, "size", op, args); !ok) return std::move(ok).error();
  auto handle = call_backend("create", [&] { return detail::backend::create(properties, size); });
  if (!handle) return in_operation(std::move(handle).error(), op, args);
  return physical_allocation(std::make_shared<detail::allocation_state>(*handle, size, g->minimum, properties,
                                                                        detail::allocation_state::kind::memory));
}

status physical_allocation::release() noexcept {
  if (!state_) return detail::released_owner("pvmm::physical_allocation::release", "physical_allocation");
  auto state = std::move(state_);
  if (state.use_count() > 1) return {};  // still mapped: the mappings release it when they go
  auto ok = state->release_handle();
  if (!ok) return in_operation(std::move(ok).error(), "pvmm::physical_allocation::release", "");
  return {};
}

result<allocation_properties> physical_allocation::properties() const {
  const char* op = "pvmm::physical_allocation::properties";
  if (!state_) return detail::released_owner(op, "physical_allocation");
  auto p = call_backend("properties", [&] { return detail::backend::properties(state_->handle); });
  if (!p) return in_operation(std::move(p).error(), op, "");
  return p;
}

namespace detail {
// Looks up the allocation mapped at `address` (defined with the reservation registry).
result<std::shared_ptr<allocation_state>> find_mapped_allocation(const void* address, const char* op);
}  // namespace detail

result<physical_allocation> physical_allocation::retain(const void* address) {
  const char* op = "pvmm::physical_allocation::retain";
  auto args = [&] { return fmt::format("address={}", address); };
  auto found = detail::find_mapped_allocation(address, op);
  if (!found) return std::move(found).error();
  if ((*found)->what != detail::allocation_state::kind::memory)
    return make_error(errc::invalid_argument, op, args, "the address maps a multicast object, not an allocation");
  // The new owner shares the mapping's reference, so it is counted exactly on every backend (HIP 6.2's
  // hipMemRetainAllocationHandle added no reference; CUDA's does): the memory goes with its last owner.
  return physical_allocation(std::move(*found));
}

namespace detail {
namespace {
result<exported_fd> export_fd(const std::shared_ptr<allocation_state>& state, const char* op, const char* what) {
  if (!state) return released_owner(op, what);
  auto args = [&] { return fmt::format("handle={:#x}", state->handle); };
  if (state->what == allocation_state::kind::memory && !contains(state->properties.exportable, handle_types::posix_fd))
    return make_error(errc::handle_type_not_requested, op, args,
                      "the allocation was not created with handle_types::posix_fd",
                      "add handle_types::posix_fd to allocation_properties::exportable");
  auto fd = call_backend("export_posix_fd", [&] { return backend::export_posix_fd(state->handle); });
  if (!fd) return in_operation(std::move(fd).error(), op, args);
  return exported_fd(*fd);
}

result<fabric_handle> export_fabric(const std::shared_ptr<allocation_state>& state, const char* op, const char* what) {
  if (!state) return released_owner(op, what);
  auto args = [&] { return fmt::format("handle={:#x}", state->handle); };
  if (state->what == allocation_state::kind::memory && !contains(state->properties.exportable, handle_types::fabric))
    return make_error(errc::handle_type_not_requested, op, args,
                      "the allocation was not created with handle_types::fabric",
                      "add handle_types::fabric to allocation_properties::exportable");
  auto h = call_backend("export_fabric", [&] { return backend::export_fabric(state->handle); });
  if (!h) return in_operation(std::move(h).error(), op, args);
  return h;
}
}  // namespace
}  // namespace detail

result<exported_fd> physical_allocation::export_posix_fd() const {
  return detail::export_fd(state_, "pvmm::physical_allocation::export_posix_fd", "physical_allocation");
}

result<fabric_handle> physical_allocation::export_fabric() const {
  return detail::export_fabric(state_, "pvmm::physical_allocation::export_fabric", "physical_allocation");
}

result<physical_allocation> physical_allocation::import_posix_fd(int fd, std::size_t size) {
  auto state = detail::import_fd_state(fd, size, detail::allocation_state::kind::memory,
                                       "pvmm::physical_allocation::import_posix_fd");
  if (!state) return std::move(state).error();
  return physical_allocation(std::move(*state));
}

result<physical_allocation> physical_allocation::import_fabric(const fabric_handle& handle, std::size_t size) {
  auto state = detail::import_fabric_state(handle, size, detail::allocation_state::kind::memory,
                                           "pvmm::physical_allocation::import_fabric");
  if (!state) return std::move(state).error();
  return physical_allocation(std::move(*state));
}

// ---- multicast ----

multicast_object::multicast_object() noexcept = default;
multicast_object::multicast_object(multicast_object&&) noexcept = default;
multicast_object& multicast_object::operator=(multicast_object&&) noexcept = default;
multicast_object::~multicast_object() = default;
multicast_object::multicast_object(std::shared_ptr<detail::allocation_state> state) noexcept
    : state_(std::move(state)) {}
std::size_t multicast_object::size() const noexcept { return state_ ? state_->size : 0; }
std::uint64_t multicast_object::native_handle() const noexcept { return state_ ? state_->handle : 0; }

namespace {
detail::multicast_request to_request(const multicast_properties& p) { return {p.team_size, p.size, p.exportable}; }
std::string describe(const multicast_properties& p) {
  return fmt::format("team_size={}, size={:#x}, exportable={:#x}", p.team_size, p.size,
                     static_cast<std::uint32_t>(p.exportable));
}
}  // namespace

result<granularity> multicast_granularity(const multicast_properties& properties) {
  const char* op = "pvmm::multicast_granularity";
  auto g = call_backend("multicast_granularity",
                        [&] { return detail::backend::multicast_granularity(to_request(properties)); });
  if (!g) return in_operation(std::move(g).error(), op, describe(properties));
  return g;
}

result<multicast_object> multicast_object::create(const multicast_properties& properties) {
  const char* op = "pvmm::multicast_object::create";
  auto args = [&] { return describe(properties); };
  if (properties.team_size == 0) return make_error(errc::invalid_argument, op, args, "team_size is zero");
  auto g = call_backend("multicast_granularity",
                        [&] { return detail::backend::multicast_granularity(to_request(properties)); });
  if (!g) return in_operation(std::move(g).error(), op, args);
  if (auto ok = detail::check_size(properties.size, g->minimum, "size", op, args); !ok) return std::move(ok).error();
  auto h = call_backend("multicast_create", [&] { return detail::backend::multicast_create(to_request(properties)); });
  if (!h) return in_operation(std::move(h).error(), op, args);
  allocation_properties props;
  props.exportable = properties.exportable;
  return multicast_object(std::make_shared<detail::allocation_state>(*h, properties.size, g->minimum, props,
                                                                     detail::allocation_state::kind::multicast));
}

result<multicast_object> multicast_object::import_posix_fd(int fd, std::size_t size) {
  auto state = detail::import_fd_state(fd, size, detail::allocation_state::kind::multicast,
                                       "pvmm::multicast_object::import_posix_fd");
  if (!state) return std::move(state).error();
  return multicast_object(std::move(*state));
}

result<multicast_object> multicast_object::import_fabric(const fabric_handle& handle, std::size_t size) {
  auto state = detail::import_fabric_state(handle, size, detail::allocation_state::kind::multicast,
                                           "pvmm::multicast_object::import_fabric");
  if (!state) return std::move(state).error();
  return multicast_object(std::move(*state));
}

status multicast_object::add_device(int ordinal) {
  const char* op = "pvmm::multicast_object::add_device";
  auto args = [&] { return fmt::format("ordinal={}", ordinal); };
  if (!state_) return detail::released_owner(op, "multicast_object");
  if (auto ok = detail::check_location(location::device(ordinal), op, args); !ok) return ok;
  auto ok = call_backend("multicast_add_device",
                         [&] { return detail::backend::multicast_add_device(state_->handle, ordinal); });
  if (!ok) return in_operation(std::move(ok).error(), op, args);
  return {};
}

status multicast_object::bind_memory(std::size_t offset, const physical_allocation& memory, std::size_t memory_offset,
                                     std::size_t size) {
  const char* op = "pvmm::multicast_object::bind_memory";
  auto args = [&] { return fmt::format("offset={:#x}, memory_offset={:#x}, size={:#x}", offset, memory_offset, size); };
  if (!state_) return detail::released_owner(op, "multicast_object");
  if (!memory.valid()) return detail::released_owner(op, "physical_allocation");
  if (auto ok = detail::check_size(size, state_->granularity, "size", op, args); !ok) return ok;
  if (offset % state_->granularity != 0 || memory_offset % state_->granularity != 0)
    return make_error(errc::unaligned, op, args,
                      fmt::format("offsets must be multiples of the multicast granularity {:#x}", state_->granularity));
  if (!detail::range_within(offset, size, state_->size))
    return make_error(errc::out_of_range, op, args,
                      fmt::format("the range exceeds the multicast object's size {:#x}", state_->size));
  if (!detail::range_within(memory_offset, size, memory.size()))
    return make_error(errc::out_of_range, op, args,
                      fmt::format("the range exceeds the allocation's size {:#x}", memory.size()));
  auto ok = call_backend("multicast_bind", [&] {
    return detail::backend::multicast_bind(state_->handle, offset, memory.native_handle(), memory_offset, size);
  });
  if (!ok) return in_operation(std::move(ok).error(), op, args);
  return {};
}

status multicast_object::unbind(int ordinal, std::size_t offset, std::size_t size) {
  const char* op = "pvmm::multicast_object::unbind";
  auto args = [&] { return fmt::format("ordinal={}, offset={:#x}, size={:#x}", ordinal, offset, size); };
  if (!state_) return detail::released_owner(op, "multicast_object");
  if (auto ok = detail::check_location(location::device(ordinal), op, args); !ok) return ok;
  if (!detail::range_within(offset, size, state_->size) || size == 0)
    return make_error(errc::out_of_range, op, args,
                      fmt::format("the range is empty or exceeds the multicast object's size {:#x}", state_->size));
  auto ok = call_backend("multicast_unbind",
                         [&] { return detail::backend::multicast_unbind(state_->handle, ordinal, offset, size); });
  if (!ok) return in_operation(std::move(ok).error(), op, args);
  return {};
}

result<exported_fd> multicast_object::export_posix_fd() const {
  return detail::export_fd(state_, "pvmm::multicast_object::export_posix_fd", "multicast_object");
}
result<fabric_handle> multicast_object::export_fabric() const {
  return detail::export_fabric(state_, "pvmm::multicast_object::export_fabric", "multicast_object");
}

status multicast_object::release() noexcept {
  if (!state_) return detail::released_owner("pvmm::multicast_object::release", "multicast_object");
  auto state = std::move(state_);
  if (state.use_count() > 1) return {};
  auto ok = state->release_handle();
  if (!ok) return in_operation(std::move(ok).error(), "pvmm::multicast_object::release", "");
  return {};
}

}  // namespace pvmm
