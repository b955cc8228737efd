// The caching allocator's state (include/pvmm/caching_allocator.hpp), shared by its parts: stream marks and fences
// (caching_streams.cpp), free lists and allocation (caching_free_lists.cpp), regions, stitching and giving back
// (caching_regions.cpp), the public members (caching_allocator.cpp). Blocks are multiples of 512 B carved from
// regions (a reserved range with physical chunks mapped into it); they split and merge at 512 B; whole idle chunks of
// free blocks are unmapped and stitched into new regions on a miss.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include <pvmm/allocation.hpp>
#include <pvmm/caching_allocator.hpp>
#include <pvmm/reservation.hpp>

#include "alloc/allocator_shell.hpp"
#include "core/operation.hpp"
#include "observe/nvtx.hpp"
#include "observe/observe.hpp"

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
  observe::nvtx::heap_owner nvtx;  // its NVTX heaps (one per mapping) while registration is on; dropped first
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

inline std::size_t round_size(std::size_t size) noexcept { return (size + min_block - 1) / min_block * min_block; }

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
  std::size_t ghost_chunks = 0;       // chunk mappings the ghosts hold
  detail::shell::event_cache events;  // events recorded at fences, reused
  std::size_t chunks_held = 0;
  // High mark of live bytes as seen at misses (the slack's measure; only misses grow the cache, and reset_peaks
  // leaves it).
  std::uint64_t live_high = 0;
  std::uint64_t epoch = 0;
  caching_stats st;
  // Memory snapshots (observe/providers_alloc.cpp): listed from create on, described by the provider.
  detail::observe::listed<state> listed;
  static void describe(detail::observe::collector& c);
  static detail::observe::provider snapshot_provider;

  ~state() {
    listed.leave();
    (void)give_back_everything(nullptr);
  }

  void note_reserved() {
    st.reserved = std::uint64_t{chunks_held} * chunk;
    detail::shell::note_peaks(st);
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
  result<fence*> record_fence(std::uint32_t p, const detail::operation& op);
  /// Moves p's `done` forward toward `want`: its fences are queried oldest first, and where no fence covers
  /// `want`, the stream itself (idle: every mark is done). Each at most once per epoch (one allocation). A failed
  /// query counts as not done: the block waits, nothing is reused on hope.
  void poll(std::uint32_t p, std::uint64_t want);
  /// One fence per stream with cross-stream frees since its last fence (recorded at the next allocation, not at
  /// each free: a run of frees between two allocations shares one event). Recorded later than the frees, so it
  /// covers every use before them. A failure leaves them unfenced: their blocks wait (a stream query may still
  /// see them done, and a device wait records its own fence).
  void fence_cross_frees(const detail::operation& op);
  /// Whether the host has seen gate g complete (asking the driver at most once per stream per epoch). With
  /// `fence_if_busy`, a busy stream gets a fence covering g so that a later poll can see it done.
  bool seen_done(const gate& g, bool fence_if_busy);
  /// Whether a cached block may be handed out on stream c now, without waiting.
  bool usable(const block& b, std::uint32_t c) {
    for (const gate& g : b.gates) {
      if (g.stream == no_stream || g.stream == c || g.mark <= streams[c].waited[g.stream]) continue;
      if (!seen_done(g, false)) return false;
    }
    return true;
  }
  /// Makes stream c wait on the device for every gate of b not yet done (fences recorded as needed).
  status wait_for(const block& b, std::uint32_t c, const detail::operation& op);
  /// Whether every use of a cached block is host-observed complete (so its chunks may be unmapped).
  bool quiet(const block& b);

  // ---- free lists: merging ----
  /// Folds `from`'s gates into `into`'s (a merged block waits for both); false when they name three streams.
  static bool merge_gates(gate* into, const gate* from, bool apply);
  /// Free neighbours merge whatever list holds them, where their gates fit in one block's two.
  static bool mergeable(block* a, const block* n) { return n && !n->live && merge_gates(a->gates, n->gates, false); }
  /// Caches a free block on its home's list, merged with its free neighbours (PyTorch's merging within a
  /// segment; the merged block waits for what either part waited for). `b` is not on any list.
  void cache(block* b);
  /// Merges `gone` (free, right after `into`) into `into`, which is on no list.
  void absorb(block* into, block* gone);

  // ---- regions: stitching and unmapping ----
  void drop_region_if_empty(region* r);
  /// Takes the whole chunks [lo, hi) (offsets in b's region) out of cached block b, which the caller took off its
  /// list: their owners go idle (to be stitched); what is left of b before and after is cached again.
  /// `unmap_now` (the host has seen every use of b complete: giving back): the chunks are unmapped here. Otherwise
  /// they stay mapped there too, as a ghost: work still queued may touch them through this range (the stream
  /// taking them is ordered after it), and an unmap can cost more than a map; unmapped later (unmap_quiet_ghosts).
  status take_chunks(block* b, std::size_t lo, std::size_t hi, bool unmap_now);
  status unmap_chunk(region& r, std::size_t at);
  /// Unmaps ghosts whose work the host has seen complete until they map at most `keep` chunks.
  status unmap_quiet_ghosts(std::size_t keep);
  /// Takes whole chunks out of cached blocks, largest blocks first, until `want` chunks are idle: for stream `c`,
  /// of blocks it may use now (as ghosts), then (wait_for_pending_frees) of blocks it waits for on the device.
  /// c == no_stream: giving back, every stream synchronized: every block, unmapped.
  status harvest(std::size_t want, std::uint32_t c, const detail::operation& op);
  /// Chunk mappings the ghosts may hold before a miss unmaps some (caching_options::max_ghost_bytes).
  std::size_t ghost_bound_chunks() const;
  void release_idle_chunks();
  /// Creates physical chunks until `count` are idle.
  status create_chunks(std::size_t count);
  /// Whether `extra` new chunks keep the bytes held within the slack: slack_percent of the high mark of live
  /// bytes above that mark, and at least two chunks above it.
  bool within_slack(std::size_t extra) const;
  /// The first half of making `count` chunks idle: whether new chunks fit in the slack (the result); if not, chunks
  /// of cached blocks (harvest). out_of_memory where the chunks still missing would pass max_reserved.
  result<bool> make_room(std::size_t count, bool slack, std::uint32_t on, const detail::operation& op);
  /// The second half: new chunks until `count` are idle; where growing into the slack finds the device full, the
  /// cached blocks' chunks first, as without slack.
  status fill_idle(std::size_t count, bool grow, std::uint32_t on, const detail::operation& op);
  /// Maps `n` idle chunks at slots [first, first + n) of r, one grant over them; a failure unmaps what it mapped.
  status map_chunks(region& r, std::size_t first, std::size_t n);
  /// After a miss mapped `n` chunks (a region made or grown): the counters, and the gate its memory needs: chunks
  /// taken as ghosts (more ghosts than `ghosts_before`) may still be in use in `on`'s order, so a fresh mark of `on`.
  gate count_miss(std::size_t n, std::uint64_t created_before, std::size_t ghosts_before, std::uint32_t on);
  /// Slots a new region of `count` chunks reserves: its chunks and address space after them to grow into.
  std::size_t slots_for(std::size_t count) const;
  /// The cached block stream c may use now that, grown in place by whole chunks mapped after it, fits `bytes` with
  /// the fewest new mappings (fewer than a new region's `count`, or one where `count` is one); null if none. `add`:
  /// the chunks it lacks.
  block* growable(std::size_t bytes, std::size_t count, std::uint32_t c, std::size_t* add);
  /// On a miss for `bytes` (`count` chunks): a cached block at the end of its region's mapped run grown in place
  /// (only the chunks it lacks mapped after it), else a new region of `count` chunks mapped back to back. Its
  /// chunks: gather. The block (whole) is returned, not cached.
  result<block*> stitch(std::size_t bytes, std::size_t count, std::uint64_t live_after, std::uint32_t on,
                        const detail::operation& op);
  result<block*> stitch_or_fail(std::size_t bytes, std::size_t count, std::uint64_t live_after, std::uint32_t on,
                                const detail::operation& op);

  // ---- allocation ----
  /// The best-fit cached block of at least `bytes` on stream p's list that stream c may use now; null if none.
  block* best_fit(std::uint32_t p, std::uint32_t c, std::size_t bytes, block** pending);
  /// Takes cached block b off its list for stream c, split to `bytes` (the rest stays cached, gated as it was).
  block* take(block* b, std::uint32_t c, std::size_t bytes);

  result<block*> find_or_make(std::size_t bytes, std::uint32_t c, const detail::operation& op);
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
    detail::observe::nvtx::region(b.reg->nvtx.get(), b.ptr, requested);
    if (detail::observe::recording())
      detail::observe::record_slow(detail::observe::action::alloc, b.ptr, requested, options.device,
                                   streams[b.home].s.native_handle().value);
    return &b;
  }

  /// Once every stream is synchronized: every cached block loses its gates and moves to stream 0's list, merged
  /// with its free neighbours whatever their home was, so that whole chunks come out of partial ones.
  void rehome_all();
  /// Synchronizes every stream the cache knows, then unmaps every ghost and every whole chunk of every cached block
  /// and gives the idle chunks back (trim, pressure, teardown). `op` null: teardown, errors ignored.
  status give_back_everything(const detail::operation* op);

  std::uint64_t cached_blocks() const;
};

}  // namespace pvmm
