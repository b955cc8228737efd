// The caching allocator's regions: chunks created, harvested from cached blocks, unmapped and given back
// (stitching them into regions: caching_stitch.cpp).
#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "alloc/caching_state.hpp"
#include "core/checked_math.hpp"

namespace pvmm {

auto caching_allocator::state::drop_region_if_empty(region* r) -> void {
  if (r->mapped) return;
  (void)r->range.release();  // nothing is mapped: a range the backend would not free goes with its destructor
  regions.erase(std::find_if(regions.begin(), regions.end(), [&](auto& x) { return x.get() == r; }));
}

auto caching_allocator::state::take_chunks(block* b, std::size_t lo, std::size_t hi, bool unmap_now) -> status {
  region* r = b->reg;
  char* base = static_cast<char*>(r->range.address());
  status failed{};
  if (unmap_now) {
    // One chunk per call, from the top: a failed unmap leaves what is below it to b (an unmap of several
    // mappings at once may stop half way).
    std::size_t cut = hi;
    while (cut > lo && (failed = unmap_chunk(*r, cut - chunk))) cut -= chunk;
    if (cut == hi) {
      streams[b->home].free.insert(b);
      return failed;
    }
    lo = cut;
  } else {
    ghosts.push_back(ghost{r, lo, hi, {b->gates[0], b->gates[1]}});
    ghost_chunks += (hi - lo) / chunk;
  }
  for (std::size_t at = lo; at < hi; at += chunk) idle_chunks.push_back(std::move(r->chunks[at / chunk]));
  char* end = b->ptr + b->size;
  block* after = nullptr;
  if (base + hi < end) {  // the part after the hole
    after = new_block();
    *after = *b;
    after->ptr = base + hi;
    after->size = static_cast<std::size_t>(end - after->ptr);
    after->prev = nullptr;
    if (after->next) after->next->prev = after;
  } else if (b->next) {
    b->next->prev = nullptr;
  }
  if (b->ptr < base + lo) {  // the part before
    b->size = static_cast<std::size_t>(base + lo - b->ptr);
    b->next = nullptr;
    streams[b->home].free.insert(b);
  } else {
    if (b->prev) b->prev->next = nullptr;
    drop_block(b);
  }
  if (after) streams[after->home].free.insert(after);
  drop_region_if_empty(r);
  return failed;
}

auto caching_allocator::state::unmap_chunk(region& r, std::size_t at) -> status {
  ++st.unmaps;
  detail::observe::nvtx::drop_chunk(r.nvtx.get(), at / chunk);  // no NVTX heap outlives its mapping
  auto ok = detail::caching::timed(st.unmap_ns, [&] { return r.range.unmap(at, chunk); });
  if (ok) --r.mapped;
  return ok;
}

auto caching_allocator::state::unmap_quiet_ghosts(std::size_t keep) -> status {
  for (std::size_t i = 0; i < ghosts.size() && ghost_chunks > keep;) {
    ghost& g = ghosts[i];
    bool done = true;
    for (const gate& x : g.gates)
      if (x.stream != no_stream && !seen_done(x, true)) done = false;
    if (!done) {
      ++i;
      continue;
    }
    for (; g.hi > g.lo; g.hi -= chunk, --ghost_chunks)  // one chunk per call: a failure leaves the ghost exact
      if (auto ok = unmap_chunk(*g.reg, g.hi - chunk); !ok) return ok;
    region* r = g.reg;
    g = ghosts.back();
    ghosts.pop_back();
    drop_region_if_empty(r);
  }
  return {};
}

auto caching_allocator::state::harvest(std::size_t want, std::uint32_t c, const detail::operation& op) -> status {
  const bool giving_back = c == no_stream;
  // Ghosts go when the cache gives back, or once their address space passes its bound (down to it: a miss
  // unmaps about what the last one ghosted, never a burst); not before: they hold no physical memory of their own.
  const std::size_t bound = ghost_bound_chunks();
  if (giving_back || ghost_chunks > bound)
    if (auto ok = unmap_quiet_ghosts(giving_back ? 0 : bound); !ok) return op.wrap(std::move(ok).error());
  std::vector<block*> candidates;
  for (auto& ps : streams)
    for (block* b : ps.free)
      if (b->size >= chunk) candidates.push_back(b);
  // The smallest block that alone holds enough whole chunks first (big free blocks stay whole for big
  // requests), then the largest first (fewest ranges cut).
  auto whole_chunks = [&](const block* b) {
    const auto from = static_cast<std::size_t>(b->ptr - static_cast<char*>(b->reg->range.address()));
    const std::size_t lo = (from + chunk - 1) / chunk * chunk, hi = (from + b->size) / chunk * chunk;
    return hi > lo ? (hi - lo) / chunk : 0;
  };
  std::sort(candidates.begin(), candidates.end(), [](block* x, block* y) { return x->size > y->size; });
  const std::size_t missing = want - std::min(want, idle_chunks.size());
  auto enough =
      std::find_if(candidates.rbegin(), candidates.rend(), [&](block* b) { return whole_chunks(b) >= missing; });
  if (enough != candidates.rend()) std::rotate(candidates.begin(), enough.base() - 1, enough.base());
  const bool may_wait = !giving_back && options.wait_for_pending_frees;
  for (int pass = 0; pass < (may_wait ? 2 : 1); ++pass)
    for (block*& b : candidates) {
      if (idle_chunks.size() >= want) return {};
      if (!b) continue;  // taken in the first pass
      char* base = static_cast<char*>(b->reg->range.address());
      const auto from = static_cast<std::size_t>(b->ptr - base);
      const std::size_t lo = (from + chunk - 1) / chunk * chunk;
      std::size_t hi = (from + b->size) / chunk * chunk;
      if (hi <= lo) continue;
      if (giving_back ? !quiet(*b) : !usable(*b, c)) {
        if (pass == 0) continue;
        if (auto ok = wait_for(*b, c, op); !ok) return ok;
      }
      const std::size_t need = want - idle_chunks.size();
      if ((hi - lo) / chunk > need) hi = lo + need * chunk;
      streams[b->home].free.erase(b);
      if (auto ok = take_chunks(b, lo, hi, giving_back); !ok) return op.wrap(std::move(ok).error());
      b = nullptr;
    }
  return {};
}

auto caching_allocator::state::ghost_bound_chunks() const -> std::size_t {
  constexpr std::uint64_t floor = std::uint64_t{16} << 30;  // address space is plentiful (47+ bits)
  const std::uint64_t bytes =
      options.max_ghost_bytes ? options.max_ghost_bytes : std::max(std::uint64_t{4} * chunks_held * chunk, floor);
  return static_cast<std::size_t>(bytes / chunk);
}

auto caching_allocator::state::release_idle_chunks() -> void {
  chunks_held -= idle_chunks.size();
  idle_chunks.clear();
  note_reserved();
}

auto caching_allocator::state::create_chunks(std::size_t count) -> status {
  while (idle_chunks.size() < count) {
    allocation_properties p;
    p.location = location::device(options.device);
    auto c = detail::caching::timed(st.create_ns, [&] { return physical_allocation::create(chunk, p); });
    if (!c) return std::move(c).error();
    ++st.chunks_created;
    idle_chunks.push_back(std::move(*c));
    ++chunks_held;
    note_reserved();
  }
  return {};
}

auto caching_allocator::state::within_slack(std::size_t extra) const -> bool {
  if (options.slack_percent == 0) return false;
  const std::uint64_t cap = live_high + std::max(live_high / 100 * options.slack_percent, std::uint64_t{2} * chunk);
  const std::uint64_t after = std::uint64_t{chunks_held + extra} * chunk;
  return after <= cap && (!options.max_reserved || after <= options.max_reserved);
}

auto caching_allocator::state::give_back_everything(const detail::operation* op) -> status {
  bool synchronized = true;
  for (std::uint32_t p = 0; p < streams.size(); ++p) {
    auto& ps = streams[p];
    ++st.host_syncs;
    if (auto ok = ps.s.synchronize(); !ok) {
      if (op) return op->wrap(std::move(ok).error());
      synchronized = false;  // teardown goes on: that stream's blocks stay gated, their chunks mapped
      continue;
    }
    ps.done = ps.mark;
    for (auto& f : ps.fences) events.give_back(std::move(f.ev));
    ps.fences.clear();
  }
  if (synchronized) rehome_all();
  ++epoch;
  const detail::operation quiet_op{"pvmm::caching_allocator::~caching_allocator"};
  if (auto ok = harvest(static_cast<std::size_t>(-1), no_stream, op ? *op : quiet_op); !ok && op) return ok;
  release_idle_chunks();
  return {};
}
}  // namespace pvmm
