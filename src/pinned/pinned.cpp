// Page-locked host memory: owners, and the registry of registered ranges, so that a range registered twice or an
// address never registered answers the same error on every backend before any driver call.
#include <pvmm/pinned.hpp>

#include <unistd.h>

#include <mutex>

#include <fmt/format.h>

#include "backend/pinned.hpp"
#include "backend/process_maps.hpp"
#include "core/device.hpp"
#include "core/operation.hpp"
#include "core/ownership.hpp"
#include "core/range_registry.hpp"

namespace pvmm {
namespace detail {
namespace {

// Registered ranges and live pinned allocations are in the range registry, which answers the overlap rule.
// registration_lock makes one step of "check for overlaps, register, record" and of "find, unregister, forget",
// so two overlapping registrations cannot both pass the check; held across the driver call, as the drivers
// serialise registration themselves. Process-wide because page-locked memory is (the drivers keep one table per
// process).
std::mutex registration_lock;

/// Drops a freed pinned allocation from the registry and the live count.
void forget_pinned(const void* data) noexcept {
  (void)range_registry::remove(data, memory_kind::pinned, nullptr, 0);
  --live_pinned;
}

/// Teardown of an owner (destructor, move-assignment): never fault-injected (an injected failure here would only
/// simulate the leak teardown exists to prevent); the owner is gone whatever the driver says.
void free_pinned_owner(void* data, std::size_t size) noexcept {
  // Forgotten before it is freed: once freed, another thread's allocation may get the same address at once, and
  // must not find this range still recorded (its record refused, or its copies checked against this one).
  forget_pinned(data);
  (void)backend::free_pinned(data, size);  // teardown: never fault-injected
}

/// [pointer, pointer + size) overlaps no memory pvmm made (under registration_lock). A pinned allocation is
/// page-locked memory as much as a registration is: overlapping either is already_registered (CUDA's driver refuses
/// a pinned allocation as CUDA_ERROR_INVALID_VALUE while mlock would lock it again). Memory pvmm made for devices
/// (reservations, pool and managed allocations) is not the program's host memory to lock: invalid_argument on
/// every backend, though the host backend's would lock.
status check_overlaps(const void* pointer, std::size_t size, const operation& op) {
  const auto other = range_registry::find_overlapping(pointer, size);
  if (!other) return {};
  switch (other->kind) {
    case memory_kind::pinned:
      return op.fail(errc::already_registered,
                     fmt::format("the range overlaps the pinned allocation [{}, +{:#x}), page-locked already",
                                 other->base, other->size),
                     "pinned memory needs no registration: use it as it is");
    case memory_kind::registered:
      return op.fail(
          errc::already_registered,
          fmt::format("the range overlaps the registration [{}, +{:#x}), registered already", other->base, other->size),
          "unregister it first, or register only what is not");
    default: {
      const char* what = other->kind == memory_kind::device ? "address reservation"
                         : other->kind == memory_kind::pool ? "pool allocation"
                                                            : "managed allocation";
      return op.fail(errc::invalid_argument,
                     fmt::format("the range overlaps the {} [{}, +{:#x}): memory pvmm made for devices cannot be "
                                 "page-locked",
                                 what, other->base, other->size),
                     "register host memory the program allocated itself, or use a pinned_allocation");
    }
  }
}

result<capabilities::host_memory_features> host_memory(const operation& op) {
  PVMM_TRY(check_location(location::device(0), op));
  PVMM_TRY_ASSIGN(caps, device_capabilities(0));
  return caps.host_memory;
}

status check_options(const pinned_options& o, const capabilities::host_memory_features& caps, const operation& op) {
  if (o.mapped && !caps.mapped)
    return op.fail(errc::not_supported, "devices cannot reach page-locked memory through a device pointer here",
                   "create with mapped = false (capabilities.host_memory.mapped)");
  return {};
}

result<void*> device_pointer_of(void* data, bool mapped, int device, const operation& op) {
  if (data == nullptr) return op.fail(errc::already_released, "the owner is empty (released or moved from)");
  PVMM_TRY(check_location(location::device(device), op));
  if (!mapped) return op.fail(errc::invalid_argument, "the memory was made with mapped = false");
  return op.step("host_device_pointer", [&] { return backend::host_device_pointer(data, device); });
}

/// Every page under [pointer, pointer + size) is mapped with some access, as the kernel sees it: registering a
/// hole or a PROT_NONE reservation is the caller's mistake, answered the same on every backend before any driver
/// call (mlock would call it out of memory, and lock the pages before the hole; cuMemHostRegister answers
/// CUDA_ERROR_INVALID_VALUE for a hole or PROT_NONE, measured on driver 580).
status check_mapped(const void* pointer, std::size_t size, const operation& op) {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<std::uintptr_t>(pointer) & ~(page - 1);
  const auto last = reinterpret_cast<std::uintptr_t>(pointer) + (size - 1);  // no wrap: checked before
  const std::uintptr_t end = (last | (page - 1)) == UINTPTR_MAX ? UINTPTR_MAX : (last | (page - 1)) + 1;
  std::uintptr_t covered = begin;  // [begin, covered) is mapped and accessible
  bool inaccessible = false;
  PVMM_TRY(for_each_mapping(begin, end, [&](std::uintptr_t lo, std::uintptr_t hi, const char* perms) {
    if (lo > covered) return false;  // a hole at `covered`
    if (!accessible(perms)) return !(inaccessible = true);
    covered = hi;
    return covered < end;
  }));
  if (covered >= end) return {};
  const auto at = reinterpret_cast<const void*>(covered);
  if (inaccessible)
    return op.fail(
        errc::invalid_argument,
        fmt::format("the memory at {} is mapped without access (PROT_NONE): nothing there can be locked", at),
        "register memory the program can read or write");
  return op.fail(errc::invalid_argument, fmt::format("no memory is mapped at {}, inside the range", at),
                 "register only memory the program has mapped (mmap, malloc, new)");
}

/// Forgets a registered range (under registration_lock).
void forget_registered(const void* pointer) noexcept {
  (void)range_registry::remove(pointer, memory_kind::registered, nullptr, 0);
  --live_registrations;
}

/// Teardown of a host_registration (destructor, move-assignment): never fault-injected; the range is forgotten
/// whatever the driver says, since no owner is left to retry.
void unregister_owner(void* pointer) noexcept {
  std::lock_guard<std::mutex> guard(registration_lock);
  const auto range = range_registry::find_start(pointer, memory_kind::registered);
  if (!range) return;                                    // unregistered through unregister_host_memory already
  (void)backend::unregister_host(pointer, range->size);  // teardown: never fault-injected
  forget_registered(pointer);
}

/// Records [base, +size) of `kind` in the range registry, after the backend made it; where there is no memory to
/// record it, `undo` gives it back (a rollback: never fault-injected) and the operation fails saying so (`undone`).
template <class Undo>
status record_or_undo(void* base, std::size_t size, memory_kind kind, const pinned_options& options, Undo undo,
                      const char* undone, const operation& op) {
  range_registry::range entry;
  entry.base = base, entry.size = size, entry.kind = kind, entry.options = options;
  if (range_registry::add(entry)) return {};
  undo();
  return op.fail(errc::out_of_memory, undone);
}

std::string options_text(const pinned_options& o) {
  return fmt::format("portable={}, mapped={}, write_combined={}", o.portable, o.mapped, o.write_combined);
}

}  // namespace
}  // namespace detail

// ---- pinned_allocation ----

result<pinned_allocation> pinned_allocation::create(std::size_t size, const pinned_options& options) {
  auto args = [&] { return fmt::format("size={:#x}, {}", size, detail::options_text(options)); };
  const detail::operation op{"pvmm::pinned_allocation::create", args};
  if (size == 0) return op.fail(errc::invalid_size, "size is zero");
  PVMM_TRY_ASSIGN(caps, detail::host_memory(op));
  if (!caps.pinned)
    return op.fail(errc::not_supported, "no page-locked allocations here", "capabilities.host_memory.pinned");
  PVMM_TRY(detail::check_options(options, caps, op));
  // Page-locked memory stays resident, so more than the machine has can never succeed. Refused here rather than by the
  // driver: CUDA's refusal of such a size (driver 580) also gives back the driver's own reserve, which the next
  // stream-heavy step takes again (tools/probes/device_memory_kept.cpp).
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0 && size / static_cast<std::size_t>(page) > static_cast<std::size_t>(pages))
    return op.fail(errc::out_of_memory,
                   fmt::format("page-locked memory stays resident, and {:#x} bytes is more than this machine's {:#x}",
                               size, static_cast<std::size_t>(pages) * static_cast<std::size_t>(page)));
  PVMM_TRY_ASSIGN(p, op.step("allocate_pinned", [&] { return detail::backend::allocate_pinned(size, options); }));
  // Recorded after the memory: a failure to record must not leave it ownerless.
  PVMM_TRY(detail::record_or_undo(
      p, size, memory_kind::pinned, options, [&] { (void)detail::backend::free_pinned(p, size); },
      "no host memory to record the pinned allocation; it was freed", op));
  ++detail::live_pinned;
  return pinned_allocation(p, size, options.mapped);
}

void pinned_allocation::teardown(holder& region) noexcept { detail::free_pinned_owner(region.data_, region.size_); }

status pinned_allocation::release() noexcept {
  auto args = [&] { return fmt::format("pointer={}", data_); };
  const detail::operation op{"pvmm::pinned_allocation::release", args};
  if (!valid()) return op.fail(errc::already_released, "this pinned_allocation is empty (released or moved from)");
  // Forgotten before it is freed (free_pinned_owner says why); a failed free records it again and leaves the owner as
  // it was, so the caller can retry or let the destructor free it.
  const auto recorded = detail::range_registry::find_start(data_, memory_kind::pinned);
  detail::forget_pinned(data_);
  if (auto freed = op.step("free_pinned", [&] { return detail::backend::free_pinned(data_, size_); }); !freed) {
    if (recorded && detail::range_registry::add(*recorded)) ++detail::live_pinned;
    return freed;
  }
  forget();
  return {};
}

result<void*> pinned_allocation::device_pointer(int device) const {
  auto args = [&] { return fmt::format("pointer={}, device={}", data_, device); };
  const detail::operation op{"pvmm::pinned_allocation::device_pointer", args};
  return detail::device_pointer_of(data_, mapped_, device, op);
}

// ---- registration ----

status register_host_memory(void* pointer, std::size_t size, const pinned_options& options) {
  auto args = [&] { return fmt::format("pointer={}, size={:#x}, {}", pointer, size, detail::options_text(options)); };
  const detail::operation op{"pvmm::register_host_memory", args};
  if (pointer == nullptr) return op.fail(errc::invalid_argument, "the pointer is null");
  if (size == 0) return op.fail(errc::invalid_size, "size is zero");
  if (options.write_combined)
    return op.fail(errc::invalid_argument, "write_combined is a property of allocations, not of registrations",
                   "use pinned_allocation::create with write_combined");
  PVMM_TRY_ASSIGN(caps, detail::host_memory(op));
  if (!caps.registration)
    return op.fail(errc::not_supported, "host memory cannot be registered here",
                   "capabilities.host_memory.registration");
  PVMM_TRY(detail::check_options(options, caps, op));
  if (reinterpret_cast<std::uintptr_t>(pointer) > UINTPTR_MAX - size)
    return op.fail(errc::out_of_range, "the range wraps around the address space");
  std::lock_guard<std::mutex> guard(detail::registration_lock);
  PVMM_TRY(detail::check_overlaps(pointer, size, op));  // before check_mapped: names pvmm's range, not its pages
  PVMM_TRY(detail::check_mapped(pointer, size, op));
  PVMM_TRY(op.step("register_host", [&] { return detail::backend::register_host(pointer, size, options); }));
  // Recorded after the driver call: a failure to record must not leave the range locked and unowned.
  PVMM_TRY(detail::record_or_undo(
      pointer, size, memory_kind::registered, options, [&] { (void)detail::backend::unregister_host(pointer, size); },
      "no host memory to record the registration; it was undone", op));
  ++detail::live_registrations;
  return {};
}

status unregister_host_memory(void* pointer) {
  auto args = [&] { return fmt::format("pointer={}", pointer); };
  const detail::operation op{"pvmm::unregister_host_memory", args};
  std::lock_guard<std::mutex> guard(detail::registration_lock);
  const auto range = detail::range_registry::find_start(pointer, memory_kind::registered);
  if (!range) return op.fail(errc::not_registered, fmt::format("{} does not start a registered range", pointer));
  auto done = op.step("unregister_host", [&] { return detail::backend::unregister_host(pointer, range->size); });
  // A failure keeps the range so that a retry can succeed, unless the driver has no record of it (then a retry
  // never would, and keeping it would refuse new memory at that address forever). Memory the program unmapped
  // first unregisters successfully: cuMemHostUnregister succeeds there (driver 580, measured), and so does the
  // host backend (the lock went with the mapping).
  if (done || done.code() == errc::not_registered) detail::forget_registered(pointer);
  return done;
}

// ---- host_registration ----

result<host_registration> host_registration::create(void* pointer, std::size_t size, const pinned_options& options) {
  auto args = [&] { return fmt::format("pointer={}, size={:#x}", pointer, size); };
  const detail::operation op{"pvmm::host_registration::create", args};
  auto done = register_host_memory(pointer, size, options);
  if (!done) return op.take_over(std::move(done).error());
  return host_registration(pointer, size, options.mapped);
}

void host_registration::teardown(holder& region) noexcept { detail::unregister_owner(region.data_); }

status host_registration::release() noexcept {
  const detail::operation op{"pvmm::host_registration::release"};
  if (!valid()) return op.fail(errc::already_released, "this host_registration is empty (released or moved from)");
  auto done = unregister_host_memory(data_);
  // A failure that kept the range leaves the owner as it was, so the caller can retry or let the destructor do it.
  if (!done && done.code() != errc::not_registered) return op.take_over(std::move(done).error());
  forget();
  if (!done) return op.take_over(std::move(done).error());
  return {};
}

result<void*> host_registration::device_pointer(int device) const {
  auto args = [&] { return fmt::format("pointer={}, device={}", data_, device); };
  const detail::operation op{"pvmm::host_registration::device_pointer", args};
  return detail::device_pointer_of(data_, mapped_, device, op);
}

}  // namespace pvmm
