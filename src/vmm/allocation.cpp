// physical_allocation: create, read back, retain from an address, export, import.
#include <new>

#include <fmt/format.h>

#include <pvmm/allocation.hpp>

#include "backend/fabric.hpp"
#include "backend/posix_fd.hpp"
#include "backend/vmm.hpp"
#include "core/address_registry.hpp"
#include "core/describe.hpp"
#include "core/device.hpp"
#include "core/owner_checks.hpp"
#include "core/ownership.hpp"

namespace pvmm {
namespace detail {
namespace {

/// Capability checks for creating memory with `p` (location already validated), before any driver call.
status check_requested_capabilities(const allocation_properties& p, const operation& op) {
  const int ordinal = device_of(p.location);
  auto caps = device_capabilities(ordinal);
  if (!caps) return op.wrap(std::move(caps).error());
  auto refuse = [&](const char* feature) {
    return op.fail(errc::not_supported, fmt::format("the {} backend's device {} does not support {}",
                                                    backend::traits.name, ordinal, feature));
  };
  if (!caps->vmm.supported) return refuse("virtual memory management");
  if (p.location.type == location::kind::host && !caps->vmm.host_location)
    return refuse("host-located physical memory");
  if (p.location.type == location::kind::host_numa && !caps->vmm.host_numa_location)
    return refuse("host-NUMA-located physical memory");
  if (contains(p.exportable, handle_types::posix_fd) && !caps->sharing.posix_fd) return refuse("POSIX fd handles");
  if (contains(p.exportable, handle_types::fabric) && !caps->sharing.fabric) return refuse("fabric handles");
  if (p.gpu_direct_rdma && !caps->vmm.gpu_direct_rdma) return refuse("GPUDirect RDMA on VMM allocations");
  if (p.compression && !caps->vmm.compression) return refuse("generic compression");
  auto known = handle_types::posix_fd | handle_types::fabric;
  if ((static_cast<std::uint32_t>(p.exportable) & ~static_cast<std::uint32_t>(known)) != 0)
    return op.fail(errc::invalid_argument,
                   fmt::format("unknown handle type bits {:#x}", static_cast<std::uint32_t>(p.exportable)));
  return {};
}

/// The location rule of properties(): host memory is reported the way it was asked for. Drivers name the same
/// host memory differently (CUDA reads host() back as host_numa(0)); the answer is used only where it names
/// the same kind of memory as the request, so a mismatch still shows. Imports hold the driver's answer.
location location_as_requested(location requested, location reported) {
  const auto host = [](location l) { return l.type == location::kind::host || l.type == location::kind::host_numa; };
  if (requested.type == location::kind::host && host(reported)) return requested;
  if (requested.type == location::kind::host_numa && reported == location::host()) return requested;  // less precise
  return reported;
}

/// The owner of a new handle; where memory runs out for it, the handle is released (not left to no one).
result<std::shared_ptr<allocation_state>> own_handle(allocation_handle handle, std::size_t size, std::size_t minimum,
                                                     const allocation_properties& p, const operation& op) {
  try {
    return std::make_shared<allocation_state>(handle, size, minimum, p);
  } catch (const std::bad_alloc&) {
    (void)backend::release(handle);  // rollback: never fault-injected
    return op.fail(errc::out_of_memory, "memory ran out for the allocation's owner; the allocation was released");
  }
}

/// Wraps an imported handle: reads its properties back to learn its granularity; releases it on failure.
result<physical_allocation> adopt_import(allocation_handle handle, std::size_t size, const operation& op) {
  try {
    auto p = op.step("properties", [&] { return backend::properties(handle); });
    auto g = p ? cached_granularity(*p) : result<granularity>(p.error());
    if (!g) {
      (void)backend::release(handle);  // rollback: never fault-injected
      return op.wrap(std::move(g).error());
    }
    // Every size is a multiple of the granularity, on import too (a driver may accept one that is not).
    if (auto sized = check_size(size, g->minimum, "size", op); !sized) {
      (void)backend::release(handle);  // rollback: never fault-injected
      return sized.error();
    }
    PVMM_TRY_ASSIGN(state, own_handle(handle, size, g->minimum, *p, op));
    state->imported = true;
    return owner_access::allocation(std::move(state));
  } catch (const std::bad_alloc&) {  // before an owner took the handle (own_handle releases it itself)
    (void)backend::release(handle);  // rollback: never fault-injected
    throw;
  }
}

}  // namespace
}  // namespace detail

using detail::owner_access;

physical_allocation::physical_allocation(std::shared_ptr<detail::allocation_state> state) noexcept
    : state_(std::move(state)) {}

std::size_t physical_allocation::size() const noexcept { return state_ ? state_->size : 0; }
allocation_handle physical_allocation::native_handle() const noexcept {
  return state_ ? state_->memory_handle() : allocation_handle{};
}

result<physical_allocation> physical_allocation::create(std::size_t size, const allocation_properties& properties) {
  auto args = [&] { return fmt::format("properties={}, size={:#x}", detail::describe(properties), size); };
  const detail::operation op{"pvmm::physical_allocation::create", args};
  PVMM_TRY(detail::check_location(properties.location, op));
  PVMM_TRY(detail::check_requested_capabilities(properties, op));
  auto g = detail::cached_granularity(properties);
  if (!g) return op.wrap(std::move(g).error());
  PVMM_TRY(detail::check_size(size, g->minimum, "size", op));
  PVMM_TRY_ASSIGN(handle, op.step("create", [&] { return detail::backend::create(properties, size); }));
  PVMM_TRY_ASSIGN(state, detail::own_handle(handle, size, g->minimum, properties, op));
  return physical_allocation(std::move(state));
}

status physical_allocation::release() noexcept {
  const detail::operation op{"pvmm::physical_allocation::release"};
  if (!state_) return detail::released_owner(op, "physical_allocation");
  auto state = std::move(state_);
  if (state.use_count() > 1) return {};  // still mapped: the mappings release it when they go
  auto ok = state->release_handle();
  if (!ok) return op.wrap(std::move(ok).error());
  return {};
}

result<allocation_properties> physical_allocation::properties() const {
  const detail::operation op{"pvmm::physical_allocation::properties"};
  if (!state_) return detail::released_owner(op, "physical_allocation");
  PVMM_TRY_ASSIGN(reported,
                  op.step("properties", [&] { return detail::backend::properties(state_->memory_handle()); }));
  reported.location = detail::location_as_requested(state_->properties.location, reported.location);
  return reported;
}

result<physical_allocation> physical_allocation::retain(const void* address) {
  auto args = [&] { return fmt::format("address={}", address); };
  const detail::operation op{"pvmm::physical_allocation::retain", args};
  PVMM_TRY_ASSIGN(found, detail::address_registry::find_mapped(address, op));
  if (found->what != detail::allocation_state::kind::memory)
    return op.fail(errc::invalid_argument, "the address maps a multicast object, not an allocation");
  // The new owner shares the mapping's reference, so it is counted exactly on every backend (HIP 6.2's
  // hipMemRetainAllocationHandle added no reference; CUDA's does): the memory goes with its last owner.
  return physical_allocation(std::move(found));
}

result<owned_fd> physical_allocation::export_posix_fd() const {
  auto args = [&] { return fmt::format("handle={:#x}", state_ ? state_->raw : 0); };
  const detail::operation op{"pvmm::physical_allocation::export_posix_fd", args};
  if (!state_) return detail::released_owner(op, "physical_allocation");
  PVMM_TRY(detail::check_exportable(state_->properties, handle_types::posix_fd, op));
  PVMM_TRY_ASSIGN(
      fd, op.fd_step("export_posix_fd", [&] { return detail::backend::export_posix_fd(state_->memory_handle()); }));
  return owned_fd(fd);
}

result<fabric_handle> physical_allocation::export_fabric() const {
  auto args = [&] { return fmt::format("handle={:#x}", state_ ? state_->raw : 0); };
  const detail::operation op{"pvmm::physical_allocation::export_fabric", args};
  if (!state_) return detail::released_owner(op, "physical_allocation");
  PVMM_TRY(detail::check_exportable(state_->properties, handle_types::fabric, op));
  return op.step("export_fabric", [&] { return detail::backend::export_fabric(state_->memory_handle()); });
}

result<physical_allocation> physical_allocation::import_posix_fd(int fd, std::size_t size) {
  auto args = [&] { return fmt::format("fd={}, size={:#x}", fd, size); };
  const detail::operation op{"pvmm::physical_allocation::import_posix_fd", args};
  PVMM_TRY(detail::check_import_fd(fd, size, op));
  PVMM_TRY(detail::check_size(size, detail::page_size(), "size", op));  // every granularity is a page multiple
  PVMM_TRY_ASSIGN(handle, op.fd_step("import_posix_fd", [&] { return detail::backend::import_posix_fd(fd, size); }));
  return detail::adopt_import(handle, size, op);
}

result<physical_allocation> physical_allocation::import_fabric(const fabric_handle& handle, std::size_t size) {
  auto args = [&] { return fmt::format("size={:#x}", size); };
  const detail::operation op{"pvmm::physical_allocation::import_fabric", args};
  PVMM_TRY(detail::check_size(size, detail::page_size(), "size", op));  // every granularity is a page multiple
  PVMM_TRY_ASSIGN(h, op.step("import_fabric", [&] { return detail::backend::import_fabric(handle, size); }));
  return detail::adopt_import(h, size, op);
}

}  // namespace pvmm
