// pvmm::query_pointer: what an address is, answered from the range registry (no driver call).
#include <pvmm/pointer.hpp>

#include <mutex>

#include <fmt/format.h>

#include "core/operation.hpp"
#include "core/ownership.hpp"
#include "core/range_registry.hpp"

namespace pvmm {
namespace detail {
namespace {

/// Whether a mapping covers `offset` of the reservation, and the device of the memory mapped there (-1 for
/// host-located memory). Called while the registry holds the reservation, so it is not freed meanwhile.
void describe_mapping(reservation_state& r, std::size_t offset, pointer_attributes& out) {
  std::lock_guard<spin_lock> guard(r.lock);
  auto m = r.mappings.upper_bound(offset);
  if (m == r.mappings.begin() || offset >= std::prev(m)->first + std::prev(m)->second.size) return;
  const auto& memory = std::prev(m)->second.memory;
  out.mapped = true;
  const location& where = memory->properties.location;
  out.device = where.type == location::kind::device ? where.id : -1;
}

}  // namespace
}  // namespace detail

result<pointer_attributes> query_pointer(const void* pointer) {
  auto args = [&] { return fmt::format("pointer={}", pointer); };
  const detail::operation op{"pvmm::query_pointer", args};
  if (pointer == nullptr) return op.fail(errc::invalid_argument, "the pointer is null");
  pointer_attributes out;
  detail::range_registry::visit(pointer, [&](const detail::range_registry::range& r) {
    out.kind = r.kind;
    out.base = const_cast<void*>(r.base);
    out.size = r.size;
    out.device = r.device;
    switch (r.kind) {
      case memory_kind::device:
        detail::describe_mapping(
            *static_cast<detail::reservation_state*>(const_cast<void*>(r.owner)),
            static_cast<std::size_t>(static_cast<const char*>(pointer) - static_cast<const char*>(r.base)), out);
        break;
      case memory_kind::managed:
        out.device_accessible_from_host = true;
        out.attach = r.attach;
        break;
      case memory_kind::pinned:
      case memory_kind::registered:
        out.device_accessible_from_host = true;
        out.host_options = r.options;
        break;
      default:
        break;
    }
  });
  return out;
}

}  // namespace pvmm
