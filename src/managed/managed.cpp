// Managed memory: owners, and the checks every backend shares (the range lies in one managed allocation pvmm made,
// the location exists and the device can take it) before any driver call.
#include <pvmm/managed.hpp>

#include <unistd.h>

#include <fmt/format.h>

#include "backend/managed.hpp"
#include "core/checked_math.hpp"
#include "core/describe.hpp"
#include "core/device.hpp"
#include "core/operation.hpp"
#include "core/ownership.hpp"
#include "core/range_registry.hpp"
#include "stream/stream_checks.hpp"

namespace pvmm {
namespace detail {
namespace {

const char* advice_name(advice a) noexcept {
  static constexpr const char* names[] = {"set_read_mostly",          "unset_read_mostly", "set_preferred_location",
                                          "unset_preferred_location", "set_accessed_by",   "unset_accessed_by"};
  return enum_name(a, names, "unknown");
}

const char* mode_name(attach_mode m) noexcept {
  static constexpr const char* names[] = {"global", "host", "single"};
  return enum_name(m, names, "unknown");
}

std::size_t page() { return static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)); }

/// One live managed allocation: its base and (page-rounded) size.
struct managed_span {
  const unsigned char* base;
  std::size_t size;
};

/// [pointer, pointer + size) lies inside one live managed allocation; returns that allocation.
result<managed_span> check_range(const void* pointer, std::size_t size, const operation& op) {
  if (pointer == nullptr) return op.fail(errc::invalid_argument, "the pointer is null");
  if (size == 0) return op.fail(errc::invalid_size, "size is zero");
  const auto* p = static_cast<const unsigned char*>(pointer);
  // Advice, prefetch and queries take raw pointers, and must refuse memory that is not managed the same way on
  // every backend: the range registry knows which memory is.
  const auto found = range_registry::find(pointer);
  if (!found || found->kind != memory_kind::managed)
    return op.fail(errc::invalid_argument, fmt::format("{} is not in a managed allocation pvmm made", pointer),
                   "allocate it with pvmm::managed_allocation::create");
  const std::size_t left = static_cast<std::size_t>(found->end() - p);
  if (size > left)
    return op.fail(errc::out_of_range,
                   fmt::format("the range runs {:#x} bytes past its managed allocation [{}, +{:#x})", size - left,
                               found->base, found->size));
  return managed_span{found->begin(), found->size};
}

/// Drops a freed allocation from the registry and the live count.
void forget_managed(const void* data) noexcept {
  (void)range_registry::remove(data, memory_kind::managed, nullptr, 0);
  --live_managed;
}

/// Teardown of an owner (destructor, move-assignment): never fault-injected, since an injected failure here would
/// only simulate the leak teardown exists to prevent; the owner is gone whatever the driver says.
void free_managed_owner(void* data) noexcept {
  (void)backend::free_managed(data);  // teardown: never fault-injected
  forget_managed(data);
}

/// The location exists, and the managed capabilities allow it (device 0's for host locations).
result<capabilities::managed_features> check_managed_location(location where, const operation& op) {
  PVMM_TRY(check_location(where, op));
  PVMM_TRY_ASSIGN(caps, device_capabilities(device_of(where)));
  if (!caps.managed.supported)
    return op.fail(errc::not_supported, fmt::format("device {} has no managed memory", device_of(where)),
                   backend::traits.managed_requirements);
  if (where.type == location::kind::host_numa && !caps.managed.host_numa_locations)
    return op.fail(errc::not_supported,
                   "this driver cannot name host NUMA nodes for managed memory (it needs CUDA 12.2's location ABI)",
                   "use location::host(), or check capabilities.managed.host_numa_locations");
  return caps.managed;
}

}  // namespace
}  // namespace detail

// ---- managed_allocation ----

result<managed_allocation> managed_allocation::create(std::size_t size, attach_mode mode) {
  auto args = [&] { return fmt::format("size={:#x}, mode={}", size, detail::mode_name(mode)); };
  const detail::operation op{"pvmm::managed_allocation::create", args};
  if (size == 0) return op.fail(errc::invalid_size, "size is zero");
  if (mode != attach_mode::global && mode != attach_mode::host)
    return op.fail(errc::invalid_argument, "managed memory is created attached globally or to the host",
                   "create with attach_mode::host, then attach_async(..., attach_mode::single, stream)");
  PVMM_TRY_ASSIGN(caps, detail::device_capabilities(0));
  if (!caps.managed.supported)
    return op.fail(errc::not_supported, "device 0 has no managed memory", detail::backend::traits.managed_requirements);
  auto rounded = detail::checked_round_up(size, detail::page());
  if (!rounded) return op.fail(errc::out_of_memory, "the size cannot exist");
  PVMM_TRY_ASSIGN(p, op.step("allocate_managed", [&] { return detail::backend::allocate_managed(*rounded, mode); }));
  // The record is made after the memory: a failure to make it must not leave the memory ownerless.
  detail::range_registry::range entry;
  entry.base = p, entry.size = *rounded, entry.kind = memory_kind::managed, entry.device = 0, entry.attach = mode;
  if (!detail::range_registry::add(entry)) {
    (void)detail::backend::free_managed(p);  // rollback: never fault-injected
    return op.fail(errc::out_of_memory, "no host memory to record the managed allocation; it was freed");
  }
  ++detail::live_managed;
  return managed_allocation(p, *rounded);
}

void managed_allocation::teardown(holder& region) noexcept { detail::free_managed_owner(region.data_); }

status managed_allocation::release() noexcept {
  auto args = [&] { return fmt::format("pointer={}", data()); };
  const detail::operation op{"pvmm::managed_allocation::release", args};
  if (!valid()) return op.fail(errc::already_released, "this managed_allocation is empty (released or moved from)");
  // A failed free leaves the owner as it was (still valid, still registered), so the caller can retry or let the
  // destructor free it.
  PVMM_TRY(op.step("free_managed", [&] { return detail::backend::free_managed(data_); }));
  detail::forget_managed(data_);
  forget();
  return {};
}

// ---- advice, prefetch, attributes, attach ----

namespace {

// One body for both forms: `where` is empty when the caller named no location.
status advise_range(const void* pointer, std::size_t size, advice what, const std::optional<location>& where) {
  auto args = [&] {
    return fmt::format("pointer={}, size={:#x}, advice={}, location={}", pointer, size, detail::advice_name(what),
                       where ? detail::describe(*where) : std::string("none"));
  };
  const detail::operation op{"pvmm::advise", args};
  PVMM_TRY(detail::check_range(pointer, size, op));
  switch (what) {
    case advice::set_read_mostly:
    case advice::unset_read_mostly:
    case advice::unset_preferred_location:  // clears whatever location was set
      if (where) PVMM_TRY(detail::check_managed_location(*where, op));
      break;
    case advice::set_preferred_location:
    case advice::set_accessed_by:
    case advice::unset_accessed_by:
      // No default processor: device 0 is rarely the one meant, and the drivers would take it silently.
      if (!where)
        return op.fail(errc::invalid_argument,
                       fmt::format("advice {} is about a processor and none was given", detail::advice_name(what)),
                       "pass the location: advise(pointer, size, what, location::device(d)) or location::host()");
      PVMM_TRY(detail::check_managed_location(*where, op));
      break;
    default:
      return op.fail(errc::invalid_argument, fmt::format("unknown advice {}", static_cast<int>(what)));
  }
  // The drivers ignore the location of the location-free advice; hand them a valid one.
  const location to = where.value_or(location::device(0));
  return op.step("advise_managed", [&] { return detail::backend::advise_managed(pointer, size, what, to); });
}

}  // namespace

status advise(const void* pointer, std::size_t size, advice what) { return advise_range(pointer, size, what, {}); }

status advise(const void* pointer, std::size_t size, advice what, location where) {
  return advise_range(pointer, size, what, where);
}

status prefetch_async(const void* pointer, std::size_t size, location to, stream_ref on) {
  auto args = [&] {
    return fmt::format("pointer={}, size={:#x}, to={}, stream={:#x}", pointer, size, detail::describe(to),
                       on.native_handle().value);
  };
  const detail::operation op{"pvmm::prefetch_async", args};
  PVMM_TRY(detail::check_range(pointer, size, op));
  PVMM_TRY(detail::check_stream(on, op));
  PVMM_TRY_ASSIGN(managed, detail::check_managed_location(to, op));
  if (to.type == location::kind::device && !managed.concurrent_access)
    return op.fail(errc::not_supported, fmt::format("device {} cannot take prefetched managed memory", to.id),
                   detail::backend::traits.managed_requirements);
  return op.step("prefetch_managed",
                 [&] { return detail::backend::prefetch_managed(pointer, size, to, on.native_handle(), on.device()); });
}

result<range_attributes> query_range(const void* pointer, std::size_t size) {
  auto args = [&] { return fmt::format("pointer={}, size={:#x}", pointer, size); };
  const detail::operation op{"pvmm::query_range", args};
  PVMM_TRY(detail::check_range(pointer, size, op));
  return op.step("query_managed_range", [&] { return detail::backend::query_managed_range(pointer, size); });
}

status attach_async(const void* pointer, std::size_t size, attach_mode mode, stream_ref on) {
  auto args = [&] {
    return fmt::format("pointer={}, size={:#x}, mode={}, stream={:#x}", pointer, size, detail::mode_name(mode),
                       on.native_handle().value);
  };
  const detail::operation op{"pvmm::attach_async", args};
  PVMM_TRY_ASSIGN(allocation, detail::check_range(pointer, size, op));
  // A stream attaches whole allocations (cuStreamAttachMemAsync documents it; CUDA's driver takes length 0 for the
  // whole, and HIP's tests expect hipErrorInvalidValue for part of one), so part of one is refused here on every
  // backend rather than silently widened. Size 0 stays invalid_size as in every other range call: the caller says
  // the allocation's size, so a range that is not the whole allocation is always the caller's mistake.
  if (static_cast<const unsigned char*>(pointer) != allocation.base || size != allocation.size)
    return op.fail(
        errc::invalid_argument,
        fmt::format("attach_async takes a whole managed allocation, and [{}, +{:#x}) is part of [{}, +{:#x})", pointer,
                    size, static_cast<const void*>(allocation.base), allocation.size),
        "pass the allocation's data() and size()");
  PVMM_TRY(detail::check_stream(on, op));
  if (mode != attach_mode::global && mode != attach_mode::host && mode != attach_mode::single)
    return op.fail(errc::invalid_argument, fmt::format("unknown attach mode {}", static_cast<int>(mode)));
  PVMM_TRY(op.step("attach_managed", [&] {
    return detail::backend::attach_managed(on.native_handle(), on.device(), pointer, size, mode);
  }));
  if (auto entry = detail::range_registry::find_start(pointer, memory_kind::managed)) {  // what query_pointer says
    entry->attach = mode;
    (void)detail::range_registry::update(*entry);
  }
  return {};
}

}  // namespace pvmm
