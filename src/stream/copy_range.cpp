// The copy-range check: see copy_range.hpp.
#include "stream/copy_range.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

#include <fmt/format.h>

#include "backend/device.hpp"
#include "backend/vmm.hpp"
#include "core/enum_text.hpp"
#include "core/ownership.hpp"
#include "core/range_registry.hpp"

namespace pvmm::detail {
namespace {

const char* end_name(copy_end end) noexcept { return end == copy_end::source ? "source" : "destination"; }

const char* kind_text(memory_kind k) noexcept {
  static constexpr const char* texts[] = {
      "range", "reservation", "pool allocation", "managed allocation", "pinned allocation", "registered host range"};
  return enum_text(k, texts, "range");
}

/// What a reservation's mappings say about [offset, offset + size): the first byte not mapped (end when every
/// byte is), and where the mapped pieces start (access is asked of each; a few are enough to find a read-only one).
struct mapping_walk {
  std::size_t unmapped_at = 0;
  bool fully_mapped = false;
  static constexpr std::size_t max_pieces = 16;
  std::size_t pieces[max_pieces] = {};
  std::size_t piece_count = 0;
};

mapping_walk walk_mappings(reservation_state& r, std::size_t offset, std::size_t size) {
  mapping_walk out;
  std::lock_guard<spin_lock> guard(r.lock);
  std::size_t at = offset;
  const std::size_t end = offset + size;
  auto m = r.mappings.upper_bound(at);
  if (m != r.mappings.begin()) --m;
  for (; at < end; ++m) {
    if (m == r.mappings.end() || m->first > at || at >= m->first + m->second.size || !r.made(m->second)) {
      out.unmapped_at = at;
      return out;
    }
    if (out.piece_count < mapping_walk::max_pieces) out.pieces[out.piece_count++] = at;
    at = m->first + m->second.size;
  }
  out.fully_mapped = true;
  return out;
}

/// Whether every host page of [begin, begin + size) is mapped in this process.
bool host_pages_mapped(const void* begin, std::size_t size) noexcept {
  static const std::uintptr_t page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  std::uintptr_t at = reinterpret_cast<std::uintptr_t>(begin) & ~(page - 1);
  const std::uintptr_t end = reinterpret_cast<std::uintptr_t>(begin) + size;
  unsigned char vec[1024];
  while (at < end) {
    const std::uintptr_t chunk = std::min<std::uintptr_t>(end - at, page * sizeof vec);
    if (mincore(reinterpret_cast<void*>(at), chunk, vec) != 0 && errno == ENOMEM) return false;
    at += (chunk + page - 1) & ~(page - 1);
  }
  return true;
}

/// One reservation's part of a copy's end, as walk_mappings found it: every byte mapped, and `device` has the
/// access the end needs at each mapped piece.
status check_reservation_part(const range_registry::range& found, const mapping_walk& walk, const char* which,
                              copy_end end, int device, const operation& op) {
  if (!walk.fully_mapped)
    return op.fail(errc::not_mapped,
                   fmt::format("the {}'s byte at {} is not mapped (reserved address space only)", which,
                               static_cast<const void*>(found.begin() + walk.unmapped_at)),
                   "map physical memory there first, or copy only the mapped part");
  const access needed = end == copy_end::destination ? access::read_write : access::read;
  for (std::size_t i = 0; i < walk.piece_count; ++i) {
    const void* piece = found.begin() + walk.pieces[i];
    auto granted = backend::get_access(location::device(device < 0 ? 0 : device), piece);
    if (!granted) return op.wrap(std::move(granted).error());
    if (static_cast<int>(*granted) < static_cast<int>(needed))
      return op.fail(errc::not_permitted,
                     fmt::format("device {} has {} access to the {} at {}, the copy needs {}", device,
                                 *granted == access::none ? "no" : "read-only", which, piece,
                                 needed == access::read ? "read" : "read_write"),
                     "grant it with set_access first");
  }
  return {};
}

/// Walks [address, address + size) across the ranges pvmm knows, one at a time; `known`: whether the first byte is
/// in one (when not, nothing is checked). A range ending before the copy does is out_of_range unless a reservation
/// follows it at once and both are reservations; with `mappings`, each reservation's part is checked as well.
status walk_known(const void* address, std::size_t size, const char* which, copy_end end, int device, bool mappings,
                  bool& known, const operation& op) {
  const auto begin = reinterpret_cast<std::uintptr_t>(address);
  const std::uintptr_t stop = begin + size;
  range_registry::range previous;
  known = false;
  for (std::uintptr_t at = begin; at < stop;) {
    range_registry::range found;
    bool here = false;
    mapping_walk walk;
    range_registry::visit(reinterpret_cast<const void*>(at), [&](const range_registry::range& r) {
      found = r;
      here = true;
      const auto r_end = reinterpret_cast<std::uintptr_t>(r.end());
      if (mappings && r.kind == memory_kind::device)
        walk = walk_mappings(*static_cast<reservation_state*>(const_cast<void*>(r.owner)),
                             static_cast<std::size_t>(at - reinterpret_cast<std::uintptr_t>(r.base)),
                             static_cast<std::size_t>(std::min(stop, r_end) - at));
    });
    if (at == begin && !here) return {};  // memory pvmm does not know: the caller's to check
    known = true;
    const bool follows = here && found.kind == memory_kind::device && previous.kind == memory_kind::device &&
                         found.base == previous.end();
    if (at != begin && !follows)
      return op.fail(errc::out_of_range,
                     fmt::format("the {} [{}, +{:#x}) runs past the end of the {} at {} (size {:#x})", which, address,
                                 size, kind_text(previous.kind), previous.base, previous.size),
                     "a copy stays inside one allocation, or inside mapped reservations that follow each other");
    if (mappings && found.kind == memory_kind::device)
      PVMM_TRY(check_reservation_part(found, walk, which, end, device, op));
    previous = found;
    at = reinterpret_cast<std::uintptr_t>(found.end());
  }
  return {};
}

}  // namespace

status check_copy_range(const void* address, std::size_t size, copy_end end, int device, const operation& op) {
  const char* which = end_name(end);
  if (address == nullptr) return op.fail(errc::invalid_argument, fmt::format("the {} is null", which));
  const auto begin = reinterpret_cast<std::uintptr_t>(address);
  if (size > UINTPTR_MAX - begin)
    return op.fail(errc::out_of_range,
                   fmt::format("the {} [{}, +{:#x}) runs past the end of the address space", which, address, size));
  // Known memory: one range, or reservations that follow each other without a gap (a growable buffer grown in
  // place owns several). Walked twice: the extent first (a range past the end is out_of_range whatever is mapped
  // in it), then each reservation's mappings and access.
  bool known = false;
  PVMM_TRY(walk_known(address, size, which, end, device, false, known, op));
  if (known) return walk_known(address, size, which, end, device, true, known, op);
  if (auto overlap = range_registry::find_overlapping(address, size))
    return op.fail(errc::out_of_range,
                   fmt::format("the {} [{}, +{:#x}) runs from memory pvmm does not know into the {} at {}", which,
                               address, size, kind_text(overlap->kind), overlap->base));
  // Asked on every backend: memory pvmm does not know is either host memory (which must be mapped here) or, on a
  // GPU backend, the runtime's own device memory, whose addresses unified addressing reserves in this process's
  // address space (mapped, perhaps PROT_NONE, as far as mincore is concerned). An address no mapping covers
  // (NULL + 16, garbage, a host range past its end) reaches no driver: cuMemcpy would fault on it.
  if (!host_pages_mapped(address, size))
    return op.fail(
        errc::not_mapped,
        fmt::format("the {} [{}, +{:#x}) is not memory pvmm made and not mapped in this process", which, address, size),
        "copy from or to memory that is allocated and mapped");
  return {};
}

}  // namespace pvmm::detail
