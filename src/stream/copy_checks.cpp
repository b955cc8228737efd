// stream_ref::copy_async's range checks (copy_checks.hpp).
#include "stream/copy_checks.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
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

status copy_not_permitted(std::uintptr_t at, copy_end which, const operation& op) {
  return op.fail(errc::not_permitted,
                 fmt::format("the {} at {:#x} is not {} in this process", copy_end_name(which), at,
                             which == copy_end::source ? "readable" : "writable"),
                 "a range set to access::read cannot be written; access::none cannot be copied at all");
}

status copy_not_mapped(std::uintptr_t at, std::uintptr_t end, copy_end which, const operation& op) {
  return op.fail(errc::not_mapped,
                 fmt::format("the {} is not mapped at {:#x} (the range ends at {:#x})", copy_end_name(which), at, end),
                 "copy only memory that is allocated and mapped");
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

/// The host backend's check from the kernel's record (/proc/self/maps): [begin, end) mapped with the permission the
/// copy needs. The fallback where madvise cannot answer (see below).
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
  if (!permitted) return copy_not_permitted(covered, which, op);
  if (covered < end) return copy_not_mapped(covered, end, which, op);
  return {};
}

/// The host backend's check: the kernel would let this process read (source) or write (destination) every byte of
/// [begin, end). For a small range MADV_POPULATE_READ/WRITE (Linux 5.14) answer without faulting and without
/// changing the data, in one call: ENOMEM for a hole, EFAULT where the access would fault (a read-only or
/// inaccessible page). Where it cannot answer (EINVAL: an older kernel, or a mapping it does not populate), and for
/// large ranges, the process map does.
status copy_check_process_access(std::uintptr_t begin, std::uintptr_t end, copy_end which, const operation& op) {
  // madvise walks every page (measured: 2 x 64 MiB cost 100 ms a copy), the process map every mapping (tens of us in a
  // Python process): the first for small copies, the second above 64 KiB.
  if (end - begin > (std::uintptr_t{64} << 10)) return copy_check_process_map(begin, end, which, op);
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const std::uintptr_t first = begin & ~(page - 1);
  const std::uintptr_t last =
      end > UINTPTR_MAX - (page - 1) ? UINTPTR_MAX & ~(page - 1) : (end + page - 1) & ~(page - 1);
  if (::madvise(reinterpret_cast<void*>(first), last - first,
                which == copy_end::source ? MADV_POPULATE_READ : MADV_POPULATE_WRITE) == 0)
    return {};
  const int err = errno;
  PVMM_TRY(copy_check_process_map(begin, end, which, op));  // names where and why, when the map can tell
  if (err == ENOMEM) return copy_not_mapped(begin, end, which, op);
  if (err == EFAULT)
    return op.fail(errc::not_permitted,
                   fmt::format("touching the {} would fault (a page the kernel cannot populate, e.g. past the end of "
                               "a mapped file)",
                               copy_end_name(which)));
  return {};  // madvise cannot answer (EINVAL); the process map said yes
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
    return copy_check_process_access(begin, end, which, op);
  return {};
}

}  // namespace pvmm::detail
