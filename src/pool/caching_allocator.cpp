// caching_allocator: one best-fit pool of blocks (multiples of 512 B) carved from regions (a reserved range with
// physical chunks mapped into it); blocks split and merge at 512 B; whole idle chunks of free blocks are unmapped
// and stitched into new regions on a miss. Streams are tracked by marks (see "Streams" below).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <pvmm/allocation.hpp>
#include <pvmm/caching_allocator.hpp>
#include <pvmm/device.hpp>
#include <pvmm/reservation.hpp>

#include "core/checked_math.hpp"
#include "core/device.hpp"
#include "core/operation.hpp"
#include "stream/stream_checks.hpp"

namespace pvmm {

// Named, not anonymous: the library is a unity build, and these names are common.
namespace detail::caching {
constexpr std::size_t min_block = 512;  // every block is a multiple: PyTorch's rounding and alignment
constexpr std::uint32_t no_stream = UINT32_MAX;

struct region;

/// Work of stream `stream` up to its `mark`-th free may still use the block: it is reusable in that stream's order
/// at once, elsewhere once the host has seen that work complete, or the other stream waited for it on the device.
struct gate {
  std::uint32_t stream = no_stream;
  std::uint64_t mark = 0;
};

struct block {
  char* ptr = nullptr;
  std::size_t size = 0;       // bytes it occupies (a multiple of min_block)
  std::size_t requested = 0;  // bytes asked for while live
  region* reg = nullptr;
  block* prev = nullptr;  // address neighbours in the region, linked only across contiguous mapped memory
  block* next = nullptr;
  std::uint32_t home = 0;  // live: the stream it was allocated on; cached: the stream whose free list holds it
  gate gates[2];           // cached: the streams whose work may still use it (home's first)
  bool live = false;
};

/// A reserved range; chunks[i] is mapped at i * chunk, or empty (a hole left by a stitch that took it).
struct region {
  address_reservation range;
  std::vector<physical_allocation> chunks;
  std::size_t mapped = 0;
};

/// Whole chunks [lo, hi) of a region whose owners a stitch took while work queued before `gates` may still touch
/// them there: they stay mapped in both places until the host has seen that work complete.
struct ghost {
  region* reg = nullptr;
  std::size_t lo = 0, hi = 0;
  gate gates[2];
};

struct fence {
  event ev;
  std::uint64_t mark = 0;  // the stream's marks up to this one were queued before it
};

struct by_size {
  bool operator()(const block* a, const block* b) const {
    return a->size != b->size ? a->size < b->size : a->ptr < b->ptr;
  }
};

struct stream_state {
  stream_ref s;
  std::set<block*, by_size> free;     // cached blocks whose home this is, best fit first
  std::uint64_t mark = 0;             // frees gated on this stream so far
  std::uint64_t cross = 0;            // the mark of its latest cross-stream free (fenced at the next allocation)
  std::uint64_t done = 0;             // marks the host has seen complete
  std::uint64_t fenced = 0;           // the newest fence's mark
  std::deque<fence> fences;           // recorded and not yet seen complete, oldest first
  std::uint64_t polled = 0;           // the epoch its fences were last queried in (once per allocation)
  std::uint64_t stream_polled = 0;    // the epoch the stream itself was last queried in
  std::vector<std::uint64_t> waited;  // by stream index: marks of that stream this one waited for on the device
};

std::size_t round_size(std::size_t size) noexcept { return (size + min_block - 1) / min_block * min_block; }

/// Calls f, adding the nanoseconds it took to `into` (the slow paths' times in caching_stats).
template <class F>
auto timed(std::uint64_t& into, F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  auto r = f();
  into += static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
  return r;
}
}  // namespace detail::caching

struct caching_allocator::state {
  using gate = detail::caching::gate;
  using block = detail::caching::block;
  using region = detail::caching::region;
  using fence = detail::caching::fence;
  using ghost = detail::caching::ghost;
  using stream_state = detail::caching::stream_state;
  static constexpr std::uint32_t no_stream = detail::caching::no_stream;
  static constexpr std::size_t min_block = detail::caching::min_block;
  static constexpr int max_gated_scan = 32;

  caching_options options;
  std::size_t chunk = 0;
  access_descriptor grant{};
  mutable std::mutex lock;
  std::deque<stream_state> streams;  // a deque: references stay valid as streams are added
  std::uint32_t last_stream = 0;     // the last one looked up (most calls repeat it)
  std::unordered_map<void*, block*> live;
  std::deque<block> block_store;  // every block object; spare ones are reused
  std::vector<block*> spare_blocks;
  std::vector<std::unique_ptr<region>> regions;
  std::vector<physical_allocation> idle_chunks;  // owned, mapped nowhere but perhaps in a ghost
  std::vector<ghost> ghosts;
  std::size_t ghost_chunks = 0;  // chunk mappings the ghosts hold
  std::vector<event> spare_events;
  std::size_t chunks_held = 0;
  // High mark of live bytes as seen at misses (the slack's measure; only misses grow the cache, and reset_peaks
  // leaves it).
  std::uint64_t live_high = 0;
  std::uint64_t epoch = 0;
  caching_stats st;

  ~state() { (void)give_back_everything(nullptr); }

  void note_reserved() {
    st.reserved = std::uint64_t{chunks_held} * chunk;
    st.peak_reserved = std::max(st.peak_reserved, st.reserved);
  }

  std::uint32_t index_of(stream_ref s) {
    if (last_stream < streams.size() && streams[last_stream].s.native_handle() == s.native_handle()) return last_stream;
    for (std::uint32_t i = 0; i < streams.size(); ++i)
      if (streams[i].s.native_handle() == s.native_handle()) return last_stream = i;
    streams.emplace_back();
    streams.back().s = s;
    for (auto& x : streams) x.waited.resize(streams.size(), 0);
    return last_stream = static_cast<std::uint32_t>(streams.size() - 1);
  }

  block* new_block() {
    if (spare_blocks.empty()) return &block_store.emplace_back();
    block* b = spare_blocks.back();
    spare_blocks.pop_back();
    *b = block{};
    return b;
  }
  void drop_block(block* b) {
    b->reg = nullptr;  // marks it spare for a pass over a snapshot of the lists (rehome_all)
    spare_blocks.push_back(b);
  }

  // ---- streams: marks, fences, the host's and the device's knowledge of them ----
  result<fence*> record_fence(std::uint32_t p, const detail::operation& op) {
    auto& ps = streams[p];
    event ev;
    if (!spare_events.empty()) {
      ev = std::move(spare_events.back());
      spare_events.pop_back();
    } else {
      auto e = detail::caching::timed(st.event_record_ns, [&] { return event::create(options.device); });
      if (!e) return op.wrap(std::move(e).error());
      ev = std::move(*e);
    }
    ++st.event_records;
    if (auto ok = detail::caching::timed(st.event_record_ns, [&] { return ev.record(ps.s); }); !ok) {
      spare_events.push_back(std::move(ev));
      return op.wrap(std::move(ok).error());
    }
    ps.fences.push_back(fence{std::move(ev), ps.mark});
    ps.fenced = ps.mark;
    return &ps.fences.back();
  }
  /// Moves p's `done` forward toward `want`: its fences are queried oldest first, and where no fence covers
  /// `want`, the stream itself (idle: every mark is done). Each at most once per epoch (one allocation). A failed
  /// query counts as not done: the block waits, nothing is reused on hope.
  void poll(std::uint32_t p, std::uint64_t want) {
    auto& ps = streams[p];
    if (ps.polled != epoch) {
      ps.polled = epoch;
      while (!ps.fences.empty()) {
        ++st.event_queries;
        auto q = detail::caching::timed(st.event_query_ns, [&] { return ps.fences.front().ev.query(); });
        if (!q || !*q) break;
        ps.done = std::max(ps.done, ps.fences.front().mark);
        spare_events.push_back(std::move(ps.fences.front().ev));
        ps.fences.pop_front();
      }
    }
    if (want > ps.done && want > ps.fenced && ps.stream_polled != epoch) {
      ps.stream_polled = epoch;
      ++st.event_queries;
      auto q = detail::caching::timed(st.event_query_ns, [&] { return ps.s.query(); });
      if (q && *q) ps.done = ps.mark;
    }
  }
  /// One fence per stream with cross-stream frees since its last fence (recorded at the next allocation, not at
  /// each free: a run of frees between two allocations shares one event). Recorded later than the frees, so it
  /// covers every use before them. A failure leaves them unfenced: their blocks wait (a stream query may still
  /// see them done, and a device wait records its own fence).
  void fence_cross_frees(const detail::operation& op) {
    for (std::uint32_t p = 0; p < streams.size(); ++p)
      if (streams[p].cross > std::max(streams[p].fenced, streams[p].done)) (void)record_fence(p, op);  // done: synced
  }
  /// Whether the host has seen gate g complete (asking the driver at most once per stream per epoch). With
  /// `fence_if_busy`, a busy stream gets a fence covering g so that a later poll can see it done.
  bool seen_done(const gate& g, bool fence_if_busy) {
    auto& ps = streams[g.stream];
    if (g.mark <= ps.done) return true;
    poll(g.stream, g.mark);
    if (g.mark <= ps.done) return true;
    if (fence_if_busy && ps.fenced < g.mark) {  // a failure leaves it unfenced: the block waits
      const detail::operation op{"pvmm::caching_allocator::allocate"};
      (void)record_fence(g.stream, op);
    }
    return false;
  }
  /// Whether a cached block may be handed out on stream c now, without waiting.
  bool usable(const block& b, std::uint32_t c) {
    for (const gate& g : b.gates) {
      if (g.stream == no_stream || g.stream == c || g.mark <= streams[c].waited[g.stream]) continue;
      if (!seen_done(g, false)) return false;
    }
    return true;
  }
  /// Makes stream c wait on the device for every gate of b not yet done (fences recorded as needed).
  status wait_for(const block& b, std::uint32_t c, const detail::operation& op) {
    for (const gate& g : b.gates) {
      if (g.stream == no_stream || g.stream == c || g.mark <= streams[c].waited[g.stream]) continue;
      if (g.mark <= streams[g.stream].done) continue;
      auto& ps = streams[g.stream];
      if (ps.fenced < g.mark)
        if (auto f = record_fence(g.stream, op); !f) return std::move(f).error();
      const fence* f = nullptr;
      for (const auto& x : ps.fences)
        if (x.mark >= g.mark) {
          f = &x;
          break;
        }
      ++st.device_waits;
      if (auto ok = detail::caching::timed(st.device_wait_ns, [&] { return streams[c].s.wait(f->ev); }); !ok)
        return op.wrap(std::move(ok).error());
      streams[c].waited[g.stream] = f->mark;
    }
    ++st.waits;
    return {};
  }
  /// Whether every use of a cached block is host-observed complete (so its chunks may be unmapped).
  bool quiet(const block& b) {
    for (const gate& g : b.gates)
      if (g.stream != no_stream && !seen_done(g, true)) return false;
    return true;
  }

  // ---- free lists: merging ----
  /// Folds `from`'s gates into `into`'s (a merged block waits for both); false when they name three streams.
  static bool merge_gates(gate* into, const gate* from, bool apply) {
    gate out[2] = {into[0], into[1]};
    for (int k = 0; k < 2; ++k) {
      const gate& g = from[k];
      if (g.stream == no_stream) continue;
      gate* slot = nullptr;
      for (gate& o : out)
        if (o.stream == g.stream) slot = &o;
      if (!slot)
        for (gate& o : out)
          if (o.stream == no_stream && !slot) slot = &o;
      if (!slot) return false;
      slot->stream = g.stream;
      slot->mark = std::max(slot->mark, g.mark);
    }
    if (apply) into[0] = out[0], into[1] = out[1];
    return true;
  }
  /// Free neighbours merge whatever list holds them, where their gates fit in one block's two.
  static bool mergeable(block* a, const block* n) { return n && !n->live && merge_gates(a->gates, n->gates, false); }
  /// Caches a free block on its home's list, merged with its free neighbours (PyTorch's merging within a
  /// segment; the merged block waits for what either part waited for). `b` is not on any list.
  void cache(block* b) {
    if (mergeable(b, b->prev)) {
      block* p = b->prev;
      streams[p->home].free.erase(p);  // its size changes
      absorb(p, b);
      b = p;
    }
    if (mergeable(b, b->next)) absorb(b, b->next);
    streams[b->home].free.insert(b);
  }
  /// Merges `gone` (free, right after `into`) into `into`, which is on no list.
  void absorb(block* into, block* gone) {
    streams[gone->home].free.erase(gone);
    merge_gates(into->gates, gone->gates, true);
    into->size += gone->size;
    into->next = gone->next;
    if (gone->next) gone->next->prev = into;
    drop_block(gone);
  }

  // ---- regions: stitching and unmapping ----
  void drop_region_if_empty(region* r) {
    if (r->mapped) return;
    (void)r->range.release();  // nothing is mapped: a range the backend would not free goes with its destructor
    regions.erase(std::find_if(regions.begin(), regions.end(), [&](auto& x) { return x.get() == r; }));
  }
  /// Takes the whole chunks [lo, hi) (offsets in b's region) out of cached block b, which the caller took off its
  /// list: their owners go idle (to be stitched); what is left of b before and after is cached again.
  /// `unmap_now` (the host has seen every use of b complete: giving back): the chunks are unmapped here. Otherwise
  /// they stay mapped there too, as a ghost: work still queued may touch them through this range (the stream
  /// taking them is ordered after it), and an unmap can cost more than a map; unmapped later (unmap_quiet_ghosts).
  status take_chunks(block* b, std::size_t lo, std::size_t hi, bool unmap_now) {
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
  status unmap_chunk(region& r, std::size_t at) {
    ++st.unmaps;
    auto ok = detail::caching::timed(st.unmap_ns, [&] { return r.range.unmap(at, chunk); });
    if (ok) --r.mapped;
    return ok;
  }
  /// Unmaps ghosts whose work the host has seen complete until they map at most `keep` chunks.
  status unmap_quiet_ghosts(std::size_t keep) {
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
  /// Takes whole chunks out of cached blocks, largest blocks first, until `want` chunks are idle: for stream `c`,
  /// of blocks it may use now (as ghosts), then (wait_for_pending_frees) of blocks it waits for on the device.
  /// c == no_stream: giving back, every stream synchronized: every block, unmapped.
  status harvest(std::size_t want, std::uint32_t c, const detail::operation& op) {
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
  /// Chunk mappings the ghosts may hold before a miss unmaps some (caching_options::max_ghost_bytes).
  std::size_t ghost_bound_chunks() const {
    constexpr std::uint64_t floor = std::uint64_t{16} << 30;  // address space is plentiful (47+ bits)
    const std::uint64_t bytes =
        options.max_ghost_bytes ? options.max_ghost_bytes : std::max(std::uint64_t{4} * chunks_held * chunk, floor);
    return static_cast<std::size_t>(bytes / chunk);
  }
  void release_idle_chunks() {
    chunks_held -= idle_chunks.size();
    idle_chunks.clear();
    note_reserved();
  }
  /// Creates physical chunks until `count` are idle.
  status create_chunks(std::size_t count) {
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
  /// Whether `extra` new chunks keep the bytes held within the slack: slack_percent of the high mark of live
  /// bytes above that mark, and at least two chunks above it.
  bool within_slack(std::size_t extra) const {
    if (options.slack_percent == 0) return false;
    const std::uint64_t cap = live_high + std::max(live_high / 100 * options.slack_percent, std::uint64_t{2} * chunk);
    const std::uint64_t after = std::uint64_t{chunks_held + extra} * chunk;
    return after <= cap && (!options.max_reserved || after <= options.max_reserved);
  }
  /// A new region of `count` chunks mapped back to back: idle chunks first, then chunks of cached blocks
  /// (harvest), then new ones. Its one block (whole) is returned, not cached.
  result<block*> stitch(std::size_t count, std::uint64_t live_after, std::uint32_t on, const detail::operation& op) {
    // A failed stitch leaves the allocator as it found it: the slack's measure as it was, no chunk it created held.
    const std::uint64_t live_high_before = live_high;
    const std::uint64_t created_at_start = st.chunks_created;
    auto made = stitch_or_fail(count, live_after, on, op);
    if (!made) {
      live_high = live_high_before;
      if (st.chunks_created != created_at_start) release_idle_chunks();
    }
    return made;
  }
  result<block*> stitch_or_fail(std::size_t count, std::uint64_t live_after, std::uint32_t on,
                                const detail::operation& op) {
    const std::size_t ghosts_before = ghosts.size();
    live_high = std::max(live_high, live_after);  // the slack's measure, this request's bytes included
    // Hysteresis: within the slack, new chunks rather than chunks cut out of cached blocks (each of those is
    // mapped again here and later unmapped at its old place, and its block's range is cut).
    const bool grow = idle_chunks.size() < count && within_slack(count - idle_chunks.size());
    if (idle_chunks.size() < count && !grow)
      if (auto ok = harvest(count, on, op); !ok) return std::move(ok).error();
    const std::size_t missing = count - std::min(count, idle_chunks.size());
    if (options.max_reserved && (chunks_held + missing) * chunk > options.max_reserved)
      return op.fail(errc::out_of_memory,
                     fmt::format("holding {:#x} bytes; {} more chunks would pass max_reserved {:#x}",
                                 std::uint64_t{chunks_held} * chunk, missing, options.max_reserved));
    // The range first: an impossible size fails there, before any chunk is created for it.
    auto range = detail::caching::timed(st.stitch_ns, [&] { return address_reservation::reserve(count * chunk); });
    if (!range) return op.wrap(std::move(range).error());
    const std::uint64_t created_before = st.chunks_created;
    if (auto made = create_chunks(count); !made) {
      // Growing into the slack failed (the device is full): the cached blocks' chunks, as without slack.
      if (!grow || made.code() != errc::out_of_memory) return op.wrap(std::move(made).error());
      if (auto ok = harvest(count, on, op); !ok) return std::move(ok).error();
      if (auto again = create_chunks(count); !again) return op.wrap(std::move(again).error());
    }
    // Chunks taken as ghosts may still be in use in `on`'s order: the new region is gated on `on` (a fresh mark).
    const gate fresh = ghosts.size() > ghosts_before ? gate{on, ++streams[on].mark} : gate{};
    auto r = std::make_unique<region>();
    r->range = std::move(*range);
    r->chunks.resize(count);
    auto roll_back = [&] {  // the chunks it mapped go idle again; the range goes with r
      for (std::size_t i = r->mapped; i-- > 0;) {
        (void)r->range.unmap(i * chunk, chunk);
        idle_chunks.push_back(std::move(r->chunks[i]));
      }
    };
    auto mapped = detail::caching::timed(st.stitch_ns, [&]() -> status {
      for (std::size_t i = 0; i < count; ++i) {
        ++st.maps;
        if (auto at = r->range.map(i * chunk, idle_chunks.back(), 0, chunk); !at) return std::move(at).error();
        r->chunks[i] = std::move(idle_chunks.back());
        idle_chunks.pop_back();
        ++r->mapped;
      }
      return r->range.set_access(0, count * chunk, {grant});
    });
    if (!mapped) {
      roll_back();
      return op.wrap(std::move(mapped).error());
    }
    ++st.stitches;
    const std::size_t reused = count - static_cast<std::size_t>(st.chunks_created - created_before);
    st.chunks_reused += reused;
    block* b = new_block();
    b->ptr = static_cast<char*>(r->range.address());
    b->size = count * chunk;
    b->reg = r.get();
    b->home = on;
    b->gates[0] = fresh;
    regions.push_back(std::move(r));
    return b;
  }

  // ---- allocation ----
  /// The best-fit cached block of at least `bytes` on stream p's list that stream c may use now; null if none.
  block* best_fit(std::uint32_t p, std::uint32_t c, std::size_t bytes, block** pending) {
    auto& list = streams[p].free;
    block key;
    key.size = bytes;
    int gated = 0;  // blocks passed over for a pending gate: bounded, so a long gated list costs no long scan
    for (auto it = list.lower_bound(&key); it != list.end() && gated < max_gated_scan; ++it, ++gated) {
      if (usable(**it, c)) return *it;
      if (!*pending || (*it)->size < (*pending)->size) *pending = *it;
    }
    return nullptr;
  }
  /// Takes cached block b off its list for stream c, split to `bytes` (the rest stays cached, gated as it was).
  block* take(block* b, std::uint32_t c, std::size_t bytes) {
    streams[b->home].free.erase(b);
    if (b->size - bytes >= min_block) {
      block* rest = new_block();
      *rest = *b;
      rest->ptr = b->ptr + bytes;
      rest->size = b->size - bytes;
      rest->prev = b;
      if (rest->next) rest->next->prev = rest;
      b->next = rest;
      b->size = bytes;
      streams[rest->home].free.insert(rest);
    }
    b->home = c;
    b->gates[0] = b->gates[1] = gate{};
    return b;
  }

  result<block*> find_or_make(std::size_t bytes, std::uint32_t c, const detail::operation& op) {
    ++epoch;
    fence_cross_frees(op);
    block* pending = nullptr;
    block* b = best_fit(c, c, bytes, &pending);  // the hot path: no driver call unless a gate is foreign
    for (std::uint32_t p = 0; !b && p < streams.size(); ++p)
      if (p != c) b = best_fit(p, c, bytes, &pending);
    if (b) {
      ++st.cache_hits;
      return take(b, c, bytes);
    }
    if (pending && options.wait_for_pending_frees) {  // memory first: wait on the device rather than reserve more
      if (auto ok = wait_for(*pending, c, op); !ok) return std::move(ok).error();
      ++st.cache_hits;
      return take(pending, c, bytes);
    }
    auto whole = detail::checked_round_up(bytes, chunk);
    if (!whole) return op.fail(errc::out_of_memory, "the size rounded up to whole chunks exceeds the address space");
    auto made = stitch(*whole / chunk, st.live + bytes, c, op);
    if (!made) return std::move(made).error();
    return take_fresh(*made, c, bytes);
  }
  block* take_fresh(block* b, std::uint32_t c, std::size_t bytes) {
    streams[c].free.insert(b);
    return take(b, c, bytes);
  }
  block* hand_out(block& b, std::size_t requested) {
    b.live = true;
    b.requested = requested;
    live.emplace(b.ptr, &b);
    ++st.live_blocks;
    st.live += requested;
    st.peak_live = std::max(st.peak_live, st.live);
    return &b;
  }

  /// Once every stream is synchronized: every cached block loses its gates and moves to stream 0's list, merged
  /// with its free neighbours whatever their home was, so that whole chunks come out of partial ones.
  void rehome_all() {
    std::vector<block*> all;
    for (auto& ps : streams) {
      all.insert(all.end(), ps.free.begin(), ps.free.end());
      ps.free.clear();
    }
    for (block* b : all) {
      b->home = 0;
      b->gates[0] = b->gates[1] = gate{};
    }
    for (block* b : all)
      if (b->reg) {                // null: merged into a neighbour already
        streams[0].free.erase(b);  // it may be there already, as the survivor of a merge: sizes change below
        cache(b);
      }
  }
  /// Synchronizes every stream the cache knows, then unmaps every ghost and every whole chunk of every cached block
  /// and gives the idle chunks back (trim, pressure, teardown). `op` null: teardown, errors ignored.
  status give_back_everything(const detail::operation* op) {
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
      for (auto& f : ps.fences) spare_events.push_back(std::move(f.ev));
      ps.fences.clear();
    }
    if (synchronized) rehome_all();
    ++epoch;
    const detail::operation quiet_op{"pvmm::caching_allocator::~caching_allocator"};
    if (auto ok = harvest(static_cast<std::size_t>(-1), no_stream, op ? *op : quiet_op); !ok && op) return ok;
    release_idle_chunks();
    return {};
  }

  std::uint64_t cached_blocks() const {
    std::uint64_t n = 0;
    for (auto& ps : streams) n += ps.free.size();
    return n;
  }
};

caching_allocator::caching_allocator() noexcept = default;
caching_allocator::caching_allocator(std::unique_ptr<state> s) noexcept : state_(std::move(s)) {}
caching_allocator::caching_allocator(caching_allocator&& other) noexcept : state_(std::move(other.state_)) {}
caching_allocator& caching_allocator::operator=(caching_allocator&& other) noexcept {
  if (this != &other) {
    caching_allocator gone(std::move(*this));
    state_ = std::move(other.state_);
  }
  return *this;
}
caching_allocator::~caching_allocator() {
  if (!state_) return;
  std::lock_guard<std::mutex> hold(state_->lock);
  if (state_->st.live_blocks == 0) return;  // ~state gives everything back
  (void)state_->give_back_everything(nullptr);
  // Blocks still allocated keep their memory mapped: never unmapped under the caller (invariant 17).
  (void)state_.release();
}

int caching_allocator::device() const noexcept { return state_ ? state_->options.device : -1; }
std::size_t caching_allocator::chunk_size() const noexcept { return state_ ? state_->chunk : 0; }

result<caching_allocator> caching_allocator::create(const caching_options& options) {
  auto args = [&] {
    return fmt::format("device={}, chunk_size={:#x}, max_reserved={:#x}", options.device, options.chunk_size,
                       options.max_reserved);
  };
  const detail::operation op{"pvmm::caching_allocator::create", args};
  if (auto ok = detail::check_location(location::device(options.device), op); !ok) return std::move(ok).error();
  auto caps = detail::device_capabilities(options.device);
  if (!caps) return op.wrap(std::move(caps).error());
  if (!caps->vmm.supported)
    return op.fail(errc::not_supported, "the device has no virtual memory management, which this allocator is built on",
                   "use pvmm::memory_pool for stream-ordered allocation on this device");
  allocation_properties p;
  p.location = location::device(options.device);
  auto g = detail::cached_granularity(p);
  if (!g) return op.wrap(std::move(g).error());
  auto unit = detail::reservation_unit();
  if (!unit) return op.wrap(std::move(unit).error());
  // The default: the recommended granularity, at least 4 MiB. A stitch grants access once per chunk it maps (about
  // 28 us a mapping on an H100, whatever its size up to 4 MiB; pvmm-bench traces --trace-chunk): 4 MiB chunks halve
  // the grants of 2 MiB ones; 8 MiB took the lognormal cross-stream trace past 1.10 reserved/live
  // (docs/performance.md, "Allocation traces").
  constexpr std::size_t default_chunk_floor = std::size_t{4} << 20;
  const std::size_t step = g->recommended ? g->recommended : g->minimum;  // a driver reporting no recommendation
  const std::size_t floor_chunk = step ? (default_chunk_floor + step - 1) / step * step : default_chunk_floor;
  std::size_t chunk = options.chunk_size ? options.chunk_size : std::max(floor_chunk, *unit);
  if (chunk % g->minimum != 0 || chunk % *unit != 0 || chunk % detail::caching::min_block != 0)
    return op.fail(errc::unaligned,
                   fmt::format("chunk_size is not a multiple of the granularity {:#x} and the reservation unit {:#x}",
                               g->minimum, *unit));
  auto s = std::make_unique<state>();
  s->options = options;
  s->chunk = chunk;
  s->grant = access_descriptor{location::device(options.device), access::read_write};
  return caching_allocator(std::move(s));
}

result<void*> caching_allocator::allocate(std::size_t size, stream_ref on) {
  auto args = [&] { return fmt::format("size={:#x}, stream={:#x}", size, on.native_handle().value); };
  const detail::operation op{"pvmm::caching_allocator::allocate", args};
  if (!state_) return op.fail(errc::already_released, "this caching_allocator is empty (released or moved from)");
  if (size == 0) return op.fail(errc::invalid_size, "size is 0");
  if (auto ok = detail::check_stream(on, op); !ok) return std::move(ok).error();
  auto& s = *state_;
  if (on.device() != s.options.device)
    return op.fail(errc::invalid_device, fmt::format("the stream is of device {}, the allocator of device {}",
                                                     on.device(), s.options.device));
  if (size > static_cast<std::size_t>(-1) - detail::caching::min_block)
    return op.fail(errc::out_of_memory, "the size rounded up to 512 bytes exceeds the address space");
  const std::size_t bytes = detail::caching::round_size(size);
  std::lock_guard<std::mutex> hold(s.lock);
  const std::uint32_t c = s.index_of(on);
  auto b = s.find_or_make(bytes, c, op);
  if (!b && b.code() == errc::out_of_memory) {
    // Pressure: wait for every pending free, give the whole cache back and try once more.
    ++s.st.pressure_retries;
    if (auto ok = s.give_back_everything(&op); !ok) return std::move(ok).error();
    b = s.find_or_make(bytes, c, op);
  }
  if (!b) return std::move(b).error();
  return s.hand_out(**b, size)->ptr;
}

status caching_allocator::deallocate(void* pointer, stream_ref on) {
  auto args = [&] { return fmt::format("pointer={}, stream={:#x}", pointer, on.native_handle().value); };
  const detail::operation op{"pvmm::caching_allocator::deallocate", args};
  if (!state_) return op.fail(errc::already_released, "this caching_allocator is empty (released or moved from)");
  if (auto ok = detail::check_stream(on, op); !ok) return ok;
  auto& s = *state_;
  if (on.device() != s.options.device)
    return op.fail(errc::invalid_device, fmt::format("the stream is of device {}, the allocator of device {}",
                                                     on.device(), s.options.device));
  std::lock_guard<std::mutex> hold(s.lock);
  auto it = s.live.find(pointer);
  if (it == s.live.end())
    return op.fail(errc::invalid_argument,
                   "the pointer was not returned by this allocator's allocate, or was already given back");
  auto& b = *it->second;
  const std::uint32_t freed_on = s.index_of(on);
  detail::caching::gate cross;
  if (freed_on != b.home) {  // record_stream semantics, the event recorded at the next allocation (coalesced)
    auto& fs = s.streams[freed_on];
    fs.cross = ++fs.mark;
    cross = {freed_on, fs.mark};
  }
  b.gates[0] = {b.home, ++s.streams[b.home].mark};
  b.gates[1] = cross;
  b.live = false;
  s.live.erase(it);
  --s.st.live_blocks;
  s.st.live -= b.requested;
  s.cache(&b);
  return {};
}

status caching_allocator::trim() {
  const detail::operation op{"pvmm::caching_allocator::trim"};
  if (!state_) return op.fail(errc::already_released, "this caching_allocator is empty (released or moved from)");
  std::lock_guard<std::mutex> hold(state_->lock);
  return state_->give_back_everything(&op);
}

caching_stats caching_allocator::stats() const noexcept {
  if (!state_) return {};
  std::lock_guard<std::mutex> hold(state_->lock);
  caching_stats out = state_->st;
  out.cached_blocks = state_->cached_blocks();
  out.ghost_bytes = std::uint64_t{state_->ghost_chunks} * state_->chunk;
  return out;
}

void caching_allocator::reset_peaks() noexcept {
  if (!state_) return;
  std::lock_guard<std::mutex> hold(state_->lock);
  state_->st.peak_live = state_->st.live;
  state_->st.peak_reserved = state_->st.reserved;
}

status caching_allocator::release() noexcept {
  const detail::operation op{"pvmm::caching_allocator::release"};
  if (!state_) return op.fail(errc::already_released, "this caching_allocator is empty (released or moved from)");
  {
    std::lock_guard<std::mutex> hold(state_->lock);
    if (state_->st.live_blocks)
      return op.fail(errc::busy, fmt::format("{} blocks are still allocated", state_->st.live_blocks),
                     "deallocate them first");
    if (auto ok = state_->give_back_everything(&op); !ok) return ok;
  }
  state_.reset();
  return {};
}

}  // namespace pvmm
