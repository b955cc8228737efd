// stream_ref::copy_async's range checks (copy_checks.hpp).
#include "stream/copy_checks.hpp"

#include <cstdint>
#include <cstring>
#include <iterator>
#include <mutex>

#include <fmt/format.h>

#include "backend/device.hpp"
#include "backend/process_maps.hpp"
#include "core/ownership.hpp"
#include "core/propagate.hpp"
#include "core/range_registry.hpp"

namespace pvmm::detail {

namespace {

const char* copy_end_name(copy_end end) { return end == copy_end::source ? "source" : "destination"; }

const char* copy_kind_name(memory_kind kind) {
  switch (kind) {
    case memory_kind::device:
      return "reservation";
    case memory_kind::pool:
      return "pool allocation";
    case memory_kind::managed:
      return "managed allocation";
    case memory_kind::pinned:
      return "pinned allocation";
    case memory_kind::registered:
      return "registered host";
    default:
      return "memory";
  }
}

/// The offset of the first byte of [offset, offset + size) no made mapping of `r` covers, or offset + size.
std::size_t copy_first_unmapped(reservation_state& r, std::size_t offset, std::size_t size) {
  std::lock_guard<spin_lock> guard(r.lock);
  const std::size_t end = offset + size;
  while (offset < end) {
    auto m = r.mappings.upper_bound(offset);
    if (m == r.mappings.begin()) return offset;
    --m;
    if (offset >= m->first + m->second.size || !r.made(m->second)) return offset;
    offset = m->first + m->second.size;
  }
  return end;
}

/// The host backend's check: the kernel maps [begin, end) with the permission the copy needs.
status copy_check_process_map(std::uintptr_t begin, std::uintptr_t end, copy_end which, const operation& op) {
  std::uintptr_t covered = begin;
  bool permitted = true;
  PVMM_TRY(for_each_mapping(begin, end, [&](std::uintptr_t lo, std::uintptr_t hi, const char* perms) {
    if (lo > covered) return false;  // a gap
    if (which == copy_end::source ? perms[0] != 'r' : perms[1] != 'w') {
      permitted = false;
      return false;
    }
    covered = hi;
    return covered < end;
  }));
  if (!permitted)
    return op.fail(errc::not_permitted,
                   fmt::format("the {} at {:#x} is not {} in this process", copy_end_name(which), covered,
                               which == copy_end::source ? "readable" : "writable"),
                   "a range set to access::read cannot be written; access::none cannot be copied at all");
  if (covered < end)
    return op.fail(
        errc::not_mapped,
        fmt::format("the {} is not mapped at {:#x} (the range ends at {:#x})", copy_end_name(which), covered, end),
        "copy only memory that is allocated and mapped");
  return {};
}

}  // namespace

status check_copy_range(const void* pointer, std::size_t size, copy_end which, const operation& op) {
  const auto begin = reinterpret_cast<std::uintptr_t>(pointer);
  if (size > UINTPTR_MAX - begin)
    return op.fail(
        errc::out_of_range,
        fmt::format("the {} range of {:#x} bytes wraps past the end of the address space", copy_end_name(which), size));
  const std::uintptr_t end = begin + size;
  bool known = false, reservation = false;
  std::size_t bound = 0, unmapped = 0;
  memory_kind kind = memory_kind::none;
  range_registry::visit(pointer, [&](const range_registry::range& r) {
    known = true;
    kind = r.kind;
    bound = r.size - static_cast<std::size_t>(begin - reinterpret_cast<std::uintptr_t>(r.base));
    if (r.kind == memory_kind::device && r.owner) {
      reservation = true;
      const auto offset = static_cast<std::size_t>(begin - reinterpret_cast<std::uintptr_t>(r.base));
      const std::size_t within = size < bound ? size : bound;
      unmapped =
          copy_first_unmapped(*static_cast<reservation_state*>(const_cast<void*>(r.owner)), offset, within) - offset;
    }
  });
  if (known && size > bound)
    return op.fail(errc::out_of_range,
                   fmt::format("the {} runs past the end of its {} range: {:#x} bytes from {} where {:#x} remain",
                               copy_end_name(which), copy_kind_name(kind), size, pointer, bound),
                   "a copy stays inside one allocation");
  if (reservation && unmapped < size)
    return op.fail(errc::not_mapped,
                   fmt::format("the {} is not mapped at {:#x} (reserved, no memory mapped there)", copy_end_name(which),
                               begin + unmapped),
                   "map memory there first (a sleeping allocation is unmapped until wake)");
  if (std::strcmp(backend::traits.name, "host") == 0 && (!known || reservation))
    return copy_check_process_map(begin, end, which, op);
  return {};
}

}  // namespace pvmm::detail
