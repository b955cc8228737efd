// export_dmabuf: the mappings a range covers, found in the range registry, each exported by the backend
// (pvmm/dmabuf.hpp).
#include <pvmm/dmabuf.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <mutex>

#include <fmt/format.h>

#include <pvmm/device.hpp>

#include "backend/dmabuf.hpp"
#include "core/operation.hpp"
#include "core/ownership.hpp"
#include "core/range_registry.hpp"

namespace pvmm {
namespace {

struct piece {
  char* address;
  std::size_t size;
  location where;
  bool multicast;
};

}  // namespace

result<std::vector<dmabuf_piece>> export_dmabuf(const void* address, std::size_t size) {
  auto args = [&] { return fmt::format("address={}, size={:#x}", address, size); };
  const detail::operation op{"pvmm::export_dmabuf", args};
  if (address == nullptr) return op.fail(errc::invalid_argument, "address is null");
  if (size == 0) return op.fail(errc::invalid_size, "size is zero");
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  if (reinterpret_cast<std::uintptr_t>(address) % page != 0 || size % page != 0)
    return op.fail(errc::unaligned, fmt::format("address and size must be multiples of the page size ({:#x})", page));
  char* const begin = static_cast<char*>(const_cast<void*>(address));
  if (reinterpret_cast<std::uintptr_t>(begin) + size < reinterpret_cast<std::uintptr_t>(begin))
    return op.fail(errc::out_of_range, "the range wraps around the address space");
  char* const end = begin + size;

  // The pieces, reservation by reservation (the registry's and the reservation's locks held, no backend call).
  std::vector<piece> pieces;
  for (char* at = begin; at < end;) {
    const char* gap = nullptr;
    char* next = nullptr;
    const bool found = detail::range_registry::visit(at, [&](const detail::range_registry::range& entry) {
      if (entry.kind != memory_kind::device) {
        gap = "the range holds memory that is not a pvmm reservation's mapping";
        return;
      }
      auto& r = *static_cast<detail::reservation_state*>(const_cast<void*>(entry.owner));
      char* const base = static_cast<char*>(const_cast<void*>(entry.base));
      char* const stop = std::min(end, base + entry.size);
      std::lock_guard<detail::spin_lock> guard(r.lock);
      std::size_t offset = static_cast<std::size_t>(at - base);
      auto m = r.mappings.upper_bound(offset);
      if (m == r.mappings.begin()) {
        gap = "part of the range is reserved but not mapped";
        return;
      }
      --m;
      for (; at < stop; ++m) {
        if (m == r.mappings.end() || offset < m->first || offset >= m->first + m->second.size) {
          gap = "part of the range is reserved but not mapped";
          return;
        }
        char* const piece_end = std::min(stop, base + m->first + m->second.size);
        pieces.push_back({at, static_cast<std::size_t>(piece_end - at), m->second.memory->properties.location,
                          m->second.memory->what != detail::allocation_state::kind::memory});
        at = piece_end;
        offset = static_cast<std::size_t>(at - base);
      }
      next = at;
    });
    if (!found) return op.fail(errc::not_mapped, fmt::format("no pvmm reservation holds {}", static_cast<void*>(at)));
    if (gap != nullptr) return op.fail(errc::not_mapped, gap);
    at = next;
  }

  // The capability first, for every piece's device.
  for (const piece& p : pieces) {
    if (p.where.type != location::kind::device || p.multicast)
      return op.fail(errc::not_supported,
                     "dma-buf export is for device memory; this range maps host memory or a "
                     "multicast object",
                     "register host memory with the NIC directly (ibv_reg_mr)");
    PVMM_TRY_ASSIGN(device, op.step("query_device", [&] { return query_device(p.where.id); }));
    if (!device.capabilities.sharing.dmabuf) {
      return op.fail(
          errc::not_supported,
          fmt::format("device {} ({}) does not export dma-bufs (capabilities.sharing.dmabuf)", p.where.id, device.name),
          "CUDA: the kernel driver must support dma-buf (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, open "
          "kernel modules); HIP: pvmm must be built against headers declaring hipMemGetHandleForAddressRange "
          "(HIP 7.0); the host backend's memory is a memfd and registers with ibv_reg_mr");
    }
  }
  std::vector<dmabuf_piece> out;
  out.reserve(pieces.size());
  for (const piece& p : pieces) {
    PVMM_TRY_ASSIGN(
        fd, op.fd_step("export_dmabuf", [&] { return detail::backend::export_dmabuf(p.address, p.size, p.where.id); }));
    out.push_back({owned_fd(fd), p.address, p.size});
  }
  return out;
}

}  // namespace pvmm
