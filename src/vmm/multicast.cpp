// multicast_object: create, team, bind, unbind, export and import. Mapped like memory (reservation_map.cpp).
#include <fmt/format.h>

#include <pvmm/multicast.hpp>

#include "backend/multicast.hpp"
#include "core/checked_math.hpp"
#include "core/device.hpp"
#include "core/owner_checks.hpp"
#include "core/ownership.hpp"

namespace pvmm {
namespace {
detail::backend::multicast_request to_request(const multicast_properties& p) {
  return {p.team_size, p.size, p.exportable};
}
std::string describe(const multicast_properties& p) {
  return fmt::format("team_size={}, size={:#x}, exportable={:#x}", p.team_size, p.size,
                     static_cast<std::uint32_t>(p.exportable));
}
constexpr const char* owner_name = "multicast_object";

/// An imported object: granularity 1 (the exporter checked its sizes), its properties unknown.
multicast_object adopt(multicast_handle h, std::size_t size) {
  return detail::owner_access::multicast(
      std::make_shared<detail::allocation_state>(h, size, 1, allocation_properties{}));
}
}  // namespace

multicast_object::multicast_object(std::shared_ptr<detail::allocation_state> state) noexcept
    : state_(std::move(state)) {}
std::size_t multicast_object::size() const noexcept { return state_ ? state_->size : 0; }
multicast_handle multicast_object::native_handle() const noexcept {
  return state_ ? state_->multicast() : multicast_handle{};
}

result<granularity> multicast_granularity(const multicast_properties& properties) {
  auto args = [&] { return describe(properties); };
  const detail::operation op{"pvmm::multicast_granularity", args};
  return op.step("multicast_granularity",
                 [&] { return detail::backend::multicast_granularity(to_request(properties)); });
}

result<multicast_object> multicast_object::create(const multicast_properties& properties) {
  auto args = [&] { return describe(properties); };
  const detail::operation op{"pvmm::multicast_object::create", args};
  if (properties.team_size == 0) return op.fail(errc::invalid_argument, "team_size is zero");
  PVMM_TRY_ASSIGN(g, op.step("multicast_granularity",
                             [&] { return detail::backend::multicast_granularity(to_request(properties)); }));
  PVMM_TRY(detail::check_size(properties.size, g.minimum, "size", op));
  PVMM_TRY_ASSIGN(
      h, op.step("multicast_create", [&] { return detail::backend::multicast_create(to_request(properties)); }));
  allocation_properties props;
  props.exportable = properties.exportable;
  return multicast_object(std::make_shared<detail::allocation_state>(h, properties.size, g.minimum, props));
}

result<multicast_object> multicast_object::import_posix_fd(int fd, std::size_t size) {
  auto args = [&] { return fmt::format("fd={}, size={:#x}", fd, size); };
  const detail::operation op{"pvmm::multicast_object::import_posix_fd", args};
  PVMM_TRY(detail::check_import_fd(fd, size, op));
  PVMM_TRY_ASSIGN(h,
                  op.fd_step("import_posix_fd", [&] { return detail::backend::multicast_import_posix_fd(fd, size); }));
  return adopt(h, size);
}

result<multicast_object> multicast_object::import_fabric(const fabric_handle& handle, std::size_t size) {
  auto args = [&] { return fmt::format("size={:#x}", size); };
  const detail::operation op{"pvmm::multicast_object::import_fabric", args};
  if (size == 0) return op.fail(errc::invalid_size, "size is zero");
  PVMM_TRY_ASSIGN(h, op.step("import_fabric", [&] { return detail::backend::multicast_import_fabric(handle, size); }));
  return adopt(h, size);
}

status multicast_object::add_device(int ordinal) {
  auto args = [&] { return fmt::format("ordinal={}", ordinal); };
  const detail::operation op{"pvmm::multicast_object::add_device", args};
  if (!state_) return detail::released_owner(op, owner_name);
  PVMM_TRY(detail::check_location(location::device(ordinal), op));
  return op.step("multicast_add_device",
                 [&] { return detail::backend::multicast_add_device(state_->multicast(), ordinal); });
}

status multicast_object::bind_memory(std::size_t offset, const physical_allocation& memory, std::size_t memory_offset,
                                     std::size_t size) {
  auto args = [&] { return fmt::format("offset={:#x}, memory_offset={:#x}, size={:#x}", offset, memory_offset, size); };
  const detail::operation op{"pvmm::multicast_object::bind_memory", args};
  if (!state_) return detail::released_owner(op, owner_name);
  if (!memory.valid()) return detail::released_owner(op, "physical_allocation");
  PVMM_TRY(detail::check_size(size, state_->granularity, "size", op));
  if (offset % state_->granularity != 0 || memory_offset % state_->granularity != 0)
    return op.fail(errc::unaligned,
                   fmt::format("offsets must be multiples of the multicast granularity {:#x}", state_->granularity));
  if (!detail::range_within(offset, size, state_->size))
    return op.fail(errc::out_of_range,
                   fmt::format("the range exceeds the multicast object's size {:#x}", state_->size));
  if (!detail::range_within(memory_offset, size, memory.size()))
    return op.fail(errc::out_of_range, fmt::format("the range exceeds the allocation's size {:#x}", memory.size()));
  return op.step("multicast_bind", [&] {
    return detail::backend::multicast_bind(state_->multicast(), offset, memory.native_handle(), memory_offset, size);
  });
}

status multicast_object::unbind(int ordinal, std::size_t offset, std::size_t size) {
  auto args = [&] { return fmt::format("ordinal={}, offset={:#x}, size={:#x}", ordinal, offset, size); };
  const detail::operation op{"pvmm::multicast_object::unbind", args};
  if (!state_) return detail::released_owner(op, owner_name);
  PVMM_TRY(detail::check_location(location::device(ordinal), op));
  if (!detail::range_within(offset, size, state_->size) || size == 0)
    return op.fail(errc::out_of_range,
                   fmt::format("the range is empty or exceeds the multicast object's size {:#x}", state_->size));
  return op.step("multicast_unbind",
                 [&] { return detail::backend::multicast_unbind(state_->multicast(), ordinal, offset, size); });
}

result<owned_fd> multicast_object::export_posix_fd() const {
  const detail::operation op{"pvmm::multicast_object::export_posix_fd"};
  if (!state_) return detail::released_owner(op, owner_name);
  PVMM_TRY_ASSIGN(fd, op.fd_step("export_posix_fd",
                                 [&] { return detail::backend::multicast_export_posix_fd(state_->multicast()); }));
  return owned_fd(fd);
}

result<fabric_handle> multicast_object::export_fabric() const {
  const detail::operation op{"pvmm::multicast_object::export_fabric"};
  if (!state_) return detail::released_owner(op, owner_name);
  return op.step("export_fabric", [&] { return detail::backend::multicast_export_fabric(state_->multicast()); });
}

status multicast_object::release() noexcept {
  const detail::operation op{"pvmm::multicast_object::release"};
  if (!state_) return detail::released_owner(op, owner_name);
  auto state = std::move(state_);
  if (state.use_count() > 1) return {};
  auto ok = state->release_handle();
  if (!ok) return op.wrap(std::move(ok).error());
  return {};
}

}  // namespace pvmm
