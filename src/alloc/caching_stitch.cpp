// The caching allocator's misses: chunks gathered (idle, new within the slack, or harvested from cached blocks) and
// mapped, either after a cached block at the end of its region's mapped run (grown in place) or into a new region.
#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "alloc/caching_state.hpp"

namespace pvmm {

auto caching_allocator::state::make_room(std::size_t count, bool slack, std::uint32_t on, const detail::operation& op)
    -> result<bool> {
  // Hysteresis: within the slack, new chunks rather than chunks cut out of cached blocks (each of those is
  // mapped again here and later unmapped at its old place, and its block's range is cut).
  const bool grow = slack && idle_chunks.size() < count && within_slack(count - idle_chunks.size());
  if (idle_chunks.size() < count && !grow)
    if (auto ok = harvest(count, on, op); !ok) return std::move(ok).error();
  const std::size_t missing = count - std::min(count, idle_chunks.size());
  if (options.max_reserved && (chunks_held + missing) * chunk > options.max_reserved)
    return op.fail(errc::out_of_memory, fmt::format("holding {:#x} bytes; {} more chunks would pass max_reserved {:#x}",
                                                    std::uint64_t{chunks_held} * chunk, missing, options.max_reserved));
  return grow;
}

auto caching_allocator::state::fill_idle(std::size_t count, bool grow, std::uint32_t on, const detail::operation& op)
    -> status {
  if (auto made = create_chunks(count); !made) {
    // Growing into the slack failed (the device is full): the cached blocks' chunks, as without slack.
    if (!grow || made.code() != errc::out_of_memory) return op.wrap(std::move(made).error());
    if (auto ok = harvest(count, on, op); !ok) return ok;
    if (auto again = create_chunks(count); !again) return op.wrap(std::move(again).error());
  }
  return {};
}

auto caching_allocator::state::map_chunks(region& r, std::size_t first, std::size_t n) -> status {
  std::size_t done = 0;
  auto ok = detail::caching::timed(st.stitch_ns, [&]() -> status {
    for (; done < n; ++done) {
      ++st.maps;
      const std::size_t at = first + done;
      if (auto m = r.range.map(at * chunk, idle_chunks.back(), 0, chunk); !m) return std::move(m).error();
      r.chunks[at] = std::move(idle_chunks.back());
      idle_chunks.pop_back();
      ++r.mapped;
    }
    return r.range.set_access(first * chunk, n * chunk, {grant});
  });
  if (!ok)  // the chunks it mapped go idle again
    for (std::size_t i = first + done; i-- > first;) {
      (void)r.range.unmap(i * chunk, chunk);
      --r.mapped;
      idle_chunks.push_back(std::move(r.chunks[i]));
    }
  return ok;
}

auto caching_allocator::state::count_miss(std::size_t n, std::uint64_t created_before, std::size_t ghosts_before,
                                          std::uint32_t on) -> gate {
  ++st.stitches;
  st.chunks_reused += n - static_cast<std::size_t>(st.chunks_created - created_before);
  return ghosts.size() > ghosts_before ? gate{on, ++streams[on].mark} : gate{};
}

auto caching_allocator::state::slots_for(std::size_t count) const -> std::size_t {
  // Address space is plentiful (47+ bits): four times what the region maps, at least 256 chunks, to grow into.
  const std::size_t most = static_cast<std::size_t>(-1) / chunk;
  return !options.grow_in_place || count > most / 8 ? count
                                                    : std::min(count + std::max<std::size_t>(4 * count, 256), most);
}

auto caching_allocator::state::growable(std::size_t bytes, std::size_t count, std::uint32_t c, std::size_t* add)
    -> block* {
  block* best = nullptr;
  // A request of one chunk or less takes a tail grown by that chunk rather than a region of its own: the same one
  // mapping, and the tail's bytes serve it instead of staying stranded beside a live block (one region per expert
  // weight held 1.155x the live bytes on the mixture-of-experts trace, 1.028x so). Larger requests take a growth
  // only when it maps fewer chunks than their own region (host backend, 5 rounds: allowing equal ones for up to 2 or 4
  // chunks mapped 11-36 % more on the lognormal traces and held 1.080x on the KV cache).
  std::size_t fewest = count == 1 ? 2 : count;
  if (!options.grow_in_place) return nullptr;
  const gate only_c[2] = {gate{c, 0}, gate{}};
  for (auto& ps : streams)
    for (block* b : ps.free) {
      if (b->next || b->size >= bytes) continue;  // not at the end of a mapped run, or passed over as not usable
      const region& r = *b->reg;
      const auto end = static_cast<std::size_t>(b->ptr + b->size - static_cast<const char*>(r.range.address()));
      const std::size_t k = (bytes - b->size + chunk - 1) / chunk, first = end / chunk;
      if (end % chunk || k >= fewest || first + k > r.chunks.size()) continue;
      if (std::any_of(r.chunks.begin() + first, r.chunks.begin() + first + k, [](auto& x) { return x.valid(); }))
        continue;
      const std::size_t stop = end + k * chunk;  // a ghost still maps its chunks there
      if (std::any_of(ghosts.begin(), ghosts.end(), [&](auto& g) { return g.reg == &r && g.lo < stop && g.hi > end; }))
        continue;
      if (!merge_gates(b->gates, only_c, false) || !usable(*b, c)) continue;
      best = b;
      fewest = k;
    }
  *add = fewest;
  return best;
}

auto caching_allocator::state::stitch(std::size_t bytes, std::size_t count, std::uint64_t live_after, std::uint32_t on,
                                      const detail::operation& op) -> result<block*> {
  // A failed stitch leaves the allocator as it found it: the slack's measure as it was, no chunk it created held.
  const std::uint64_t live_high_before = live_high;
  const std::uint64_t created_at_start = st.chunks_created;
  auto made = stitch_or_fail(bytes, count, live_after, on, op);
  if (!made) {
    live_high = live_high_before;
    if (st.chunks_created != created_at_start) release_idle_chunks();
  }
  return made;
}

auto caching_allocator::state::stitch_or_fail(std::size_t bytes, std::size_t count, std::uint64_t live_after,
                                              std::uint32_t on, const detail::operation& op) -> result<block*> {
  const std::size_t ghosts_before = ghosts.size();
  live_high = std::max(live_high, live_after);  // the slack's measure, this request's bytes included
  std::size_t add = 0;
  if (block* tail = growable(bytes, count, on, &add)) {
    // Grown in place: only the chunks it lacks are mapped, after it (one grant over them). New chunks within the
    // slack, as for a new region: chunks cut out of cached blocks map as many now but leave those blocks too short
    // for the requests they would have served (KV cache trace at slack 25 on an H200: 0.051 chunks mapped per
    // alloc+free and 2.52x PyTorch's mean with cuts, 0.0026 and 0.68x with new chunks).
    streams[tail->home].free.erase(tail);  // not harvested meanwhile
    region& r = *tail->reg;
    const std::size_t first = static_cast<std::size_t>(tail->ptr + tail->size - static_cast<char*>(r.range.address()));
    const std::uint64_t created_before = st.chunks_created;
    auto grown = [&]() -> status {
      auto grow = make_room(add, true, on, op);
      if (!grow) return std::move(grow).error();
      if (auto ok = fill_idle(add, *grow, on, op); !ok) return ok;
      if (auto ok = map_chunks(r, first / chunk, add); !ok) return op.wrap(std::move(ok).error());
      return {};
    }();
    if (!grown) {
      streams[tail->home].free.insert(tail);
      return std::move(grown).error();
    }
    for (std::size_t i = 0; i < add; ++i) detail::observe::nvtx::add_chunk(r.nvtx.get(), first / chunk + i);
    tail->size += add * chunk;
    const gate fresh[2] = {count_miss(add, created_before, ghosts_before, on), gate{}};
    merge_gates(tail->gates, fresh, true);  // fits: growable checked that a gate of `on` does
    tail->home = on;
    return tail;
  }
  auto grow = make_room(count, true, on, op);
  if (!grow) return std::move(grow).error();
  // The range first: an impossible size fails there, before any chunk is created for it.
  auto range =
      detail::caching::timed(st.stitch_ns, [&] { return address_reservation::reserve(slots_for(count) * chunk); });
  if (!range) return op.wrap(std::move(range).error());
  const std::uint64_t created_before = st.chunks_created;
  if (auto ok = fill_idle(count, *grow, on, op); !ok) return std::move(ok).error();
  auto r = std::make_unique<region>();
  r->range = std::move(*range);
  r->chunks.resize(r->range.size() / chunk);
  if (auto ok = map_chunks(*r, 0, count); !ok) return op.wrap(std::move(ok).error());  // the range goes with r
  const gate fresh = count_miss(count, created_before, ghosts_before, on);
  block* b = new_block();
  b->ptr = static_cast<char*>(r->range.address());
  b->size = count * chunk;
  b->reg = r.get();
  b->home = on;
  b->gates[0] = fresh;
  r->nvtx.reset(detail::observe::nvtx::open(r->range.address(), chunk, count));  // a heap per mapping
  regions.push_back(std::move(r));
  return b;
}

}  // namespace pvmm
