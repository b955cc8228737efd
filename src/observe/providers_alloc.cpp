// The snapshot providers of the allocators built on reservations (src/alloc): each caching allocator's regions with
// its blocks (live, cached, waiting for another stream's work) and ghost chunks, and each sleeping allocator's
// allocations by tag, awake or asleep, with their host copies. They run before the range provider, so the
// reservations under them are described once, here.
#include <map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "alloc/caching_state.hpp"
#include "alloc/sleeping_state.hpp"
#include "core/enum_text.hpp"
#include "observe/observe.hpp"

namespace pvmm {
namespace detail::observe {
namespace {
std::uintptr_t at(const void* p) noexcept { return reinterpret_cast<std::uintptr_t>(p); }

const char* kept_in(sleep_policy p) noexcept {
  static constexpr const char* texts[] = {"discarded", "in pinned host memory", "in pageable host memory", "in a file"};
  return enum_text(p, texts, "");
}
}  // namespace
}  // namespace detail::observe

using detail::observe::at;
using detail::observe::collector;
using detail::observe::provider;
namespace caching = detail::caching;

// The state types are private to their owners: their providers are static members (access as the owners' own).
provider caching_allocator::state::snapshot_provider{"caching allocators", provider::owners, describe};
provider sleeping_allocator::state::snapshot_provider{"sleeping allocators", provider::owners, describe};

void caching_allocator::state::describe(collector& c) {
  detail::observe::listed<state>::for_each([&](state& s) {
    std::lock_guard<std::mutex> guard(s.lock);
    const std::int64_t number = c.number_of(&s);
    std::map<const caching::region*, std::vector<snapshot_block>> blocks;
    for (const auto& b : s.block_store) {
      if (b.reg == nullptr) continue;  // a spare block object
      snapshot_block out{at(b.ptr), b.size, b.live ? b.requested : 0, block_state::inactive, {}};
      if (b.live) {
        out.state = block_state::active_allocated;
      } else if (b.gates[1].stream != caching::no_stream && s.streams[b.gates[1].stream].done < b.gates[1].mark) {
        out.state = block_state::active_awaiting_free;  // freed, another stream's work may still use it
        out.label = "freed on another stream, not yet seen complete";
      }
      blocks[b.reg].push_back(std::move(out));
    }
    for (const auto& g : s.ghosts)
      blocks[g.reg].push_back({at(static_cast<char*>(g.reg->range.address()) + g.lo), g.hi - g.lo, 0,
                               block_state::inactive, "ghost: chunks stitched elsewhere, mapped here until done"});
    for (const auto& r : s.regions) {
      snapshot_segment seg;
      seg.device = s.options.device;
      seg.address = at(r->range.address());
      seg.total_size = r->range.size();
      seg.kind = "caching";
      seg.is_expandable = true;
      seg.pool_id[0] = 2, seg.pool_id[1] = number;
      seg.label = fmt::format("caching allocator {}: {} of {} chunks of {:#x} mapped{}", number, r->mapped,
                              r->chunks.size(), s.chunk, r->nvtx.get() ? ", NVTX heap" : "");
      seg.blocks = std::move(blocks[r.get()]);
      c.add(std::move(seg));
    }
  });
}

void sleeping_allocator::state::describe(collector& c) {
  using detail::observe::kept_in;
  detail::observe::listed<state>::for_each([&](state& s) {
    std::lock_guard<std::mutex> guard(s.lock);
    const std::int64_t number = c.number_of(&s);
    for (const auto& [address, e] : s.entries) {
      snapshot_segment seg;
      seg.device = s.options.device;
      seg.address = address;
      seg.total_size = e->size;
      seg.kind = "sleeping";
      seg.is_expandable = true;
      seg.pool_id[0] = 3, seg.pool_id[1] = number;
      // A sleep or wake works on a moving entry outside the lock: only its constant fields are read then.
      const char* now = e->moving ? "moving (a sleep or wake runs)" : e->asleep ? "asleep" : "awake";
      std::string copy;
      if (!e->moving && e->asleep)
        copy = e->copy ? fmt::format(", contents {}", kept_in(e->copy->kind)) : ", discarded";
      seg.label = fmt::format("sleeping allocator {}, tag '{}': {}{}", number, e->tag, now, copy);
      if (!e->moving && !e->asleep)
        seg.blocks.push_back({address, e->size, e->size, block_state::active_allocated, {}});
      c.add(std::move(seg));
      // The tag's pinned host copy (one store per tag and sleep, shared by its entries): described once, here.
      if (!e->moving && e->copy && e->copy->kind == sleep_policy::offload_pinned && e->copy->memory() &&
          !c.claimed(at(e->copy->memory()))) {
        snapshot_segment host;
        host.address = at(e->copy->memory());
        host.total_size = e->copy->page_locked_bytes();
        host.kind = "pinned";
        host.label = fmt::format("sleeping allocator {}: host copy of tag '{}'", number, e->tag);
        host.blocks.push_back({host.address, e->copy->bytes, e->copy->bytes, block_state::active_allocated, {}});
        c.add(std::move(host));
      }
    }
  });
}

}  // namespace pvmm
