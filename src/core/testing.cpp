// pvmm/testing.hpp: data movement for tests. The device that runs a copy is chosen here, once for every
// backend: the one asked for, else the first device with access to the mapped side.
#include <fmt/format.h>

#include <pvmm/reservation.hpp>
#include <pvmm/testing.hpp>

#include "backend/testing.hpp"
#include "backend/vmm.hpp"
#include "core/address_registry.hpp"
#include "core/device.hpp"
#include "stream/copy_range.hpp"

namespace pvmm::testing {
namespace {
result<int> copy_device(const void* mapped, int device, const detail::operation& op) {
  if (device >= 0) {
    PVMM_TRY(detail::check_location(location::device(device), op));
    return device;
  }
  // Asked of the backend directly: a test helper is no step of the operation under test (fault injection
  // and call counting must not see it).
  PVMM_TRY_ASSIGN(count, detail::cached_device_count());
  PVMM_TRY(detail::address_registry::find_mapped(mapped, op));
  for (int d = 0; d < count; ++d) {
    auto a = detail::backend::get_access(location::device(d), mapped);
    if (a && *a != access::none) return d;
  }
  return op.fail(errc::not_mapped, "no device has access to the address");
}

/// Both directions alike: `mapped` is the side whose device is looked up; `name` and `mapped_arg` name the call.
template <class Copy>
status copy_mapped(void* destination, const void* source, std::size_t size, int device, const void* mapped,
                   const char* name, const char* mapped_arg, Copy copy) {
  if (size == 0) return {};  // nothing to move; the pointers may be null (memcpy must not see them)
  auto args = [&] { return fmt::format("{}={}, size={:#x}, device={}", mapped_arg, mapped, size, device); };
  const detail::operation op{name, args};
  PVMM_TRY_ASSIGN(d, copy_device(mapped, device, op));
  PVMM_TRY(detail::check_copy_range(destination, size, detail::copy_end::destination, d, op));
  PVMM_TRY(detail::check_copy_range(source, size, detail::copy_end::source, d, op));
  auto ok = copy(destination, source, size, d);
  if (!ok) return op.wrap(std::move(ok).error());
  return {};
}
}  // namespace

status copy_to_mapping(void* destination, const void* source, std::size_t size, int device) {
  return copy_mapped(destination, source, size, device, destination, "pvmm::testing::copy_to_mapping", "destination",
                     detail::backend::copy_to_mapping);
}

status copy_from_mapping(void* destination, const void* source, std::size_t size, int device) {
  return copy_mapped(destination, source, size, device, source, "pvmm::testing::copy_from_mapping", "source",
                     detail::backend::copy_from_mapping);
}

result<bool> write_faults(void* address) {
  auto args = [&] { return fmt::format("address={}", address); };
  const detail::operation op{"pvmm::testing::write_faults", args};
  auto r = detail::backend::write_faults(address);
  if (!r) return op.wrap(std::move(r).error());
  return r;
}

}  // namespace pvmm::testing
