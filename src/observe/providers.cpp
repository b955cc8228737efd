// The snapshot providers of the memory the range registry knows (core/range_registry.hpp): reservations with their
// mappings, pool allocations, managed, pinned and registered memory. Owners built on them (the caching allocator,
// team windows, the sleeping allocator) add their own view (a lower-order provider) or a label.
#include <new>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/ownership.hpp"
#include "core/range_registry.hpp"
#include "observe/observe.hpp"
#include "pool/pool_state.hpp"

namespace pvmm::detail::observe {
namespace {

/// Carries segments out of a registry pass (built under the shard's lock, labelled and added outside it).
struct gathered {
  std::vector<snapshot_segment> segments;
  std::vector<const void*> owners;  // per segment: the pool (pool allocations), else null
  bool out_of_memory = false;
};

std::uintptr_t address_of(const void* p) noexcept { return reinterpret_cast<std::uintptr_t>(p); }

int device_of(const allocation_properties& p) noexcept {
  return p.location.type == location::kind::device ? p.location.id : -1;
}

/// The one body of the range_registry callbacks below: adds the segment of range `entry` (its address and size set)
/// that fill(seg) completes, with the owner fill returns (or null); memory running out stops the gathering.
template <class Fill>
void gather_range(const range_registry::range& entry, void* context, Fill fill) {
  auto& out = *static_cast<gathered*>(context);
  if (out.out_of_memory) return;
  try {
    snapshot_segment seg;
    seg.address = address_of(entry.base);
    seg.total_size = entry.size;
    const void* owner = fill(seg);
    out.segments.push_back(std::move(seg));
    out.owners.push_back(owner);
  } catch (const std::bad_alloc&) {
    out.out_of_memory = true;
  }
}

/// A reservation: one block per mapping (active_allocated), the unmapped rest inactive.
void reservation_segment(const range_registry::range& entry, void* context) {
  gather_range(entry, context, [&](snapshot_segment& seg) -> const void* {
    seg.kind = "reservation";
    seg.is_expandable = true;
    seg.device = -2;  // decided by the first mapping
    // The registry's lock keeps the reservation from being freed meanwhile; its own lock, its table.
    auto& r = *static_cast<reservation_state*>(const_cast<void*>(entry.owner));
    std::lock_guard<spin_lock> guard(r.lock);
    for (const auto& [offset, m] : r.mappings) {
      if (!r.made(m) || !m.memory) continue;  // a map in flight is not a mapping yet
      const auto& a = *m.memory;
      const bool multicast = a.what == allocation_state::kind::multicast;
      if (seg.device == -2) seg.device = multicast ? 0 : device_of(a.properties);
      snapshot_block b;
      b.address = seg.address + offset;
      b.size = m.size;
      b.requested_size = m.size;
      b.state = block_state::active_allocated;
      b.label = fmt::format("{} at offset {:#x} of {:#x} bytes{}", multicast ? "multicast object" : "physical memory",
                            m.memory_offset, a.size, a.imported ? " imported from another process" : "");
      seg.blocks.push_back(std::move(b));
    }
    if (seg.device == -2) seg.device = entry.device >= 0 ? entry.device : 0;
    return nullptr;
  });
}

/// Any other range: one segment, one block.
void whole_range(const range_registry::range& entry, void* context) {
  gather_range(entry, context, [&](snapshot_segment& seg) {
    seg.device = entry.device;
    snapshot_block b{seg.address, entry.size, entry.size, block_state::active_allocated, {}};
    const void* owner = nullptr;
    switch (entry.kind) {
      case memory_kind::pool: {
        const auto& pool = *static_cast<const pool_state*>(entry.owner);
        seg.kind = "pool";
        seg.device = pool.device;
        owner = entry.owner;
        b.label = fmt::format("{} allocation held by {}", pool.imported ? "imported pool's" : "pool",
                              entry.holder == 0 ? "a pool_allocation" : "a raw pointer");
        break;
      }
      case memory_kind::managed:
        seg.kind = "managed";
        seg.device = entry.device >= 0 ? entry.device : 0;
        break;
      case memory_kind::pinned:
        seg.kind = "pinned";
        seg.device = -1;
        break;
      case memory_kind::registered:
        seg.kind = "registered";
        seg.device = -1;
        b.label = "host memory the program owns, page-locked";
        break;
      default:
        seg.kind = "other";
        break;
    }
    seg.blocks.push_back(std::move(b));
    return owner;
  });
}

void add_gathered(collector& c, gathered& g) {
  if (g.out_of_memory) throw std::bad_alloc();
  for (std::size_t i = 0; i < g.segments.size(); ++i) {
    auto& seg = g.segments[i];
    if (c.claimed(seg.address)) continue;  // an owner described it already
    if (g.owners[i] != nullptr) seg.pool_id[0] = 1, seg.pool_id[1] = c.number_of(g.owners[i]);
    seg.label = label_of(reinterpret_cast<const void*>(seg.address));
    c.add(std::move(seg));
  }
}

void collect_ranges(collector& c) {
  gathered g;
  range_registry::for_each(memory_kind::device, reservation_segment, &g);
  for (auto kind : {memory_kind::pool, memory_kind::managed, memory_kind::pinned, memory_kind::registered})
    range_registry::for_each(kind, whole_range, &g);
  add_gathered(c, g);
}

provider ranges_provider{"ranges", provider::ranges, collect_ranges};

}  // namespace
}  // namespace pvmm::detail::observe
