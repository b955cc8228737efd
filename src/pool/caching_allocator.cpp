// caching_allocator: blocks cached per home stream; large blocks and small-class segments are "spans" (one reserved
// range with chunks mapped back to back); idle spans are dissolved into chunks and stitched into new spans.
#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
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
constexpr std::size_t min_block = 512;  // every size rounds to a multiple: PyTorch's alignment
// Size-class rounding wastes at most 1/4 of a small request, but fewer classes leave fewer partly used segments:
// small requests are few bytes next to large ones.
constexpr unsigned classes_per_doubling = 4;

/// An event recorded on a stream, shared by the blocks it covers; back to the spare list when no block needs it.
struct fence {
  event ev;
  unsigned refs = 0;
  bool done = false;
};

struct span {
  address_reservation range;
  std::vector<physical_allocation> chunks;
};

/// A reserved range holding large blocks (one span stitched, then split and merged); freed when nothing is mapped.
struct region {
  address_reservation range;
  std::size_t mapped = 0;  // chunks mapped in it
};

struct segment;  // a span carved into slots of one size class

struct block {
  void* ptr = nullptr;
  std::size_t size = 0;        // bytes it occupies (class size, or whole chunks)
  std::size_t requested = 0;   // bytes asked for while allocated
  stream_ref home;             // the stream whose order its last use is in (for a cached block)
  std::uint64_t free_seq = 0;  // home's free counter at its free (a fence after it covers it)
  fence* cross = nullptr;      // recorded on the freeing stream when it was not home
  bool live = false;
  segment* seg = nullptr;  // small blocks: their segment
  std::size_t class_index = 0;
  // Large blocks: their region, the chunks mapped at ptr (in order), the adjacent blocks in the region.
  region* reg = nullptr;
  std::vector<physical_allocation> chunks;
  block* prev = nullptr;
  block* next = nullptr;
};

struct segment {
  span memory;
  std::size_t class_index = 0;
  std::size_t slots = 0;
  std::size_t busy = 0;  // slots allocated
  std::vector<block*> members;
};

struct stream_bins {
  stream_ref s;
  std::vector<std::vector<block*>> small;    // by class index
  std::multimap<std::size_t, block*> large;  // by size
  std::uint64_t free_counter = 0;
  fence* latest = nullptr;  // the newest fence recorded on this stream
  std::uint64_t latest_seq = 0;
};

std::size_t class_size(std::size_t size) noexcept {
  if (size <= min_block) return min_block;
  std::size_t e = 0;
  while ((std::size_t{1} << (e + 1)) < size) ++e;  // 2^e < size <= 2^(e+1)
  const std::size_t step = std::max(min_block, (std::size_t{1} << e) / classes_per_doubling);
  return (size + step - 1) / step * step;
}
}  // namespace detail::caching

struct caching_allocator::state {
  using fence = detail::caching::fence;
  using span = detail::caching::span;
  using block = detail::caching::block;
  using segment = detail::caching::segment;
  using region = detail::caching::region;
  using stream_bins = detail::caching::stream_bins;
  static constexpr std::size_t min_block = detail::caching::min_block;
  static std::size_t class_size(std::size_t n) noexcept { return detail::caching::class_size(n); }

  caching_options options;
  std::size_t chunk = 0;
  access_descriptor grant{};
  mutable std::mutex lock;
  std::deque<stream_bins> streams;                           // a deque: references stay valid as streams are added
  std::unordered_map<void*, std::unique_ptr<block>> blocks;  // every block, live or cached, by address
  std::vector<std::unique_ptr<segment>> segments;
  std::vector<std::unique_ptr<region>> regions;
  std::vector<std::size_t> class_sizes;  // index -> bytes
  std::vector<physical_allocation> idle_chunks;
  std::vector<std::unique_ptr<fence>> fences;
  std::vector<fence*> spare_fences;
  std::size_t chunks_held = 0;
  caching_stats st;

  ~state() { (void)give_back_everything(/*blocking=*/true, nullptr); }

  std::uint64_t reserved() const { return std::uint64_t{chunks_held} * chunk; }
  void note_reserved() {
    st.reserved = reserved();
    st.peak_reserved = std::max(st.peak_reserved, st.reserved);
  }

  std::size_t class_of(std::size_t bytes) {
    const std::size_t c = class_size(bytes);
    auto it = std::lower_bound(class_sizes.begin(), class_sizes.end(), c);
    return static_cast<std::size_t>(it - class_sizes.begin());
  }

  stream_bins& bins(stream_ref s) {
    for (auto& b : streams)
      if (b.s.native_handle() == s.native_handle()) return b;
    streams.push_back(stream_bins{s, std::vector<std::vector<block*>>(class_sizes.size()), {}, 0, nullptr, 0});
    return streams.back();
  }

  // ---- fences ----
  result<fence*> record_fence(stream_ref on, const detail::operation& op) {
    fence* f = nullptr;
    if (!spare_fences.empty()) {
      f = spare_fences.back();
      spare_fences.pop_back();
    } else {
      auto e = event::create(options.device);
      if (!e) return op.wrap(std::move(e).error());
      fences.push_back(std::make_unique<fence>());
      f = fences.back().get();
      f->ev = std::move(*e);
    }
    if (auto ok = f->ev.record(on); !ok) {
      spare_fences.push_back(f);
      return op.wrap(std::move(ok).error());
    }
    f->done = false;
    f->refs = 1;
    return f;
  }
  void drop(fence*& f) {
    if (f && --f->refs == 0) spare_fences.push_back(f);
    f = nullptr;
  }
  /// Whether `f` has completed: asks the event (host-observed); `blocking` synchronizes it.
  bool complete(fence* f, bool blocking) {
    if (!f || f->done) return true;
    if (blocking) {
      f->done = f->ev.synchronize().has_value();
    } else {
      auto q = f->ev.query();
      f->done = q && *q;
    }
    return f->done;
  }
  /// The fence on b's home stream covering b's free, recorded now if the newest does not cover it.
  result<fence*> home_fence(block& b, const detail::operation& op) {
    auto& h = bins(b.home);
    if (!h.latest || h.latest_seq < b.free_seq) {
      auto f = record_fence(h.s, op);
      if (!f) return std::move(f).error();
      drop(h.latest);
      h.latest = *f;
      h.latest_seq = h.free_counter;
    }
    return h.latest;
  }

  /// Makes a cached block usable on `on`: nothing to do on its home stream unless a cross-stream free is pending;
  /// elsewhere its home fence too. A pending gate is waited for on `on` (wait_for_pending_frees) or refuses (false).
  result<bool> claim(block& b, stream_ref on, const detail::operation& op) {
    fence* gates[2] = {b.cross, nullptr};
    if (b.home.native_handle() != on.native_handle()) {
      auto f = home_fence(b, op);
      if (!f) return std::move(f).error();
      gates[1] = *f;
    }
    bool waited = false;
    for (fence* g : gates) {
      if (complete(g, false)) continue;
      if (!options.wait_for_pending_frees) return false;
      if (auto ok = on.wait(g->ev); !ok) return op.wrap(std::move(ok).error());
      waited = true;
    }
    if (waited) ++st.waits;
    drop(b.cross);
    b.home = on;
    return true;
  }
  /// Whether every use of a cached block is host-observed complete (so it may be unmapped).
  result<bool> idle(block& b, bool blocking, const detail::operation& op) {
    if (!complete(b.cross, blocking)) return false;
    auto f = home_fence(b, op);
    if (!f) return std::move(f).error();
    if (complete(*f, blocking)) return true;
    // A fence recorded just now may not answer done yet on an idle stream; the stream's own query covers it.
    auto q = b.home.query();
    if (q && *q) (*f)->done = true;
    return (*f)->done;
  }

  // ---- spans ----
  /// Unmaps `chunks` (mapped back to back from `offset` in `range`) last first, each going idle as it is unmapped:
  /// a failure leaves the prefix still mapped and the vector naming exactly it (reservation::unmap over several
  /// mappings is not atomic, so the tail is unmapped one mapping at a time).
  status unmap_tail_first(address_reservation& range, std::size_t offset, std::vector<physical_allocation>& chunks,
                          std::size_t* mapped_count) {
    while (!chunks.empty()) {
      if (auto ok = range.unmap(offset + (chunks.size() - 1) * chunk, chunk); !ok) return ok;
      idle_chunks.push_back(std::move(chunks.back()));
      chunks.pop_back();
      if (mapped_count) --*mapped_count;
    }
    return {};
  }
  /// Unmaps a span and frees its range; the chunks go idle.
  status unmap(span& s) {
    if (auto ok = unmap_tail_first(s.range, 0, s.chunks, nullptr); !ok) return ok;
    // Nothing is mapped any more, so the caller drops the span; a range the backend would not free now is freed
    // again by its destructor.
    (void)s.range.release();
    return {};
  }
  /// Unmaps a cached large block's chunks (they go idle) and frees its region once nothing is mapped there. On a
  /// failure the block keeps the chunks still mapped (its size says so; the caller caches it again).
  status unmap_block(block& b) {
    const auto offset =
        static_cast<std::size_t>(static_cast<char*>(b.ptr) - static_cast<char*>(b.reg->range.address()));
    auto ok = unmap_tail_first(b.reg->range, offset, b.chunks, &b.reg->mapped);
    if (b.next && b.chunks.size() * chunk != b.size) {  // a hole after it now: nothing merges across it
      b.next->prev = nullptr;
      b.next = nullptr;
    }
    b.size = b.chunks.size() * chunk;
    if (!ok) return ok;
    if (b.prev) b.prev->next = nullptr;
    if (b.reg->mapped == 0)  // the region goes (its destructor frees the range if release could not)
      regions.erase(std::find_if(regions.begin(), regions.end(), [&](auto& r) { return r.get() == b.reg; }));
    return {};
  }
  /// Unmaps idle cached large blocks (any stream) until `want` chunks are idle; true when there are.
  result<bool> dissolve_large(std::size_t want, bool blocking, const detail::operation& op) {
    for (auto& h : streams)
      for (auto it = h.large.begin(); it != h.large.end() && idle_chunks.size() < want;) {
        block& b = *it->second;
        auto quiet = idle(b, blocking, op);
        if (!quiet) return std::move(quiet).error();
        if (!*quiet) {
          ++it;
          continue;
        }
        it = h.large.erase(it);
        if (auto ok = unmap_block(b); !ok) {
          h.large.emplace(b.size, &b);  // what is still mapped stays cached
          return op.wrap(std::move(ok).error());
        }
        drop(b.cross);
        --st.cached_blocks;
        blocks.erase(b.ptr);
      }
    return idle_chunks.size() >= want;
  }
  /// Gives back cached segments whose slots are all free and idle.
  status dissolve_segments(bool blocking, const detail::operation& op) {
    for (std::size_t i = 0; i < segments.size();) {
      segment& g = *segments[i];
      bool quiet = g.busy == 0;
      for (block* m : g.members) {
        if (!quiet) break;
        auto q = idle(*m, blocking, op);
        if (!q) return std::move(q).error();
        quiet = *q;
      }
      if (!quiet) {
        ++i;
        continue;
      }
      for (block* m : g.members) {
        auto& list = bins(m->home).small[g.class_index];
        list.erase(std::remove(list.begin(), list.end(), m), list.end());
        drop(m->cross);
        --st.cached_blocks;
        blocks.erase(m->ptr);
      }
      g.members.clear();  // a failed unmap below is retried with no slots left to hand out
      if (auto ok = unmap(g.memory); !ok) return op.wrap(std::move(ok).error());
      segments.erase(segments.begin() + static_cast<std::ptrdiff_t>(i));
    }
    return {};
  }
  void release_idle_chunks() {
    chunks_held -= idle_chunks.size();
    idle_chunks.clear();
    note_reserved();
  }

  /// Rolls back a stitch: its chunks go idle; those a failed unmap leaves mapped go with the span's destructor.
  void release_unmappable(span& s) {
    if (!unmap(s)) {
      chunks_held -= s.chunks.size();
      note_reserved();
    }
  }
  /// A new range of `count` chunks: idle chunks first, then chunks of idle cached blocks, then new ones.
  result<span> stitch(std::size_t count, const detail::operation& op) {
    if (idle_chunks.size() < count) {
      auto enough = dissolve_large(count, false, op);
      if (!enough) return std::move(enough).error();
    }
    const std::size_t reused = std::min(count, idle_chunks.size());
    while (idle_chunks.size() < count) {
      if (options.max_reserved && (chunks_held + 1) * chunk > options.max_reserved)
        return op.fail(errc::out_of_memory,
                       fmt::format("holding {:#x} bytes; another chunk would pass max_reserved {:#x}", reserved(),
                                   options.max_reserved));
      allocation_properties p;
      p.location = location::device(options.device);
      auto c = physical_allocation::create(chunk, p);
      if (!c) return op.wrap(std::move(c).error());
      idle_chunks.push_back(std::move(*c));
      ++chunks_held;
      note_reserved();
    }
    span s;
    auto range = address_reservation::reserve(count * chunk);
    if (!range) return op.wrap(std::move(range).error());
    s.range = std::move(*range);
    for (std::size_t i = 0; i < count; ++i) {
      auto at = s.range.map(i * chunk, idle_chunks.back(), 0, chunk);
      if (!at) {
        release_unmappable(s);  // the chunks it took go back to the idle list
        return op.wrap(std::move(at).error());
      }
      s.chunks.push_back(std::move(idle_chunks.back()));
      idle_chunks.pop_back();
    }
    if (auto ok = s.range.set_access(0, count * chunk, {grant}); !ok) {
      release_unmappable(s);
      return op.wrap(std::move(ok).error());
    }
    ++st.stitches;
    st.chunks_reused += reused;
    return s;
  }

  // ---- allocation ----
  block* hand_out(block& b, std::size_t requested) {
    b.live = true;
    b.requested = requested;
    ++st.live_blocks;
    st.live += requested;
    st.peak_live = std::max(st.peak_live, st.live);
    if (b.seg) ++b.seg->busy;
    return &b;
  }

  result<block*> small_block(std::size_t ci, stream_ref on, const detail::operation& op) {
    auto& own = bins(on).small[ci];
    if (!own.empty()) {  // the hot path: the newest free of this class on this stream
      block* b = own.back();
      auto ok = claim(*b, on, op);
      if (!ok) return std::move(ok).error();
      if (*ok) {
        own.pop_back();
        --st.cached_blocks;
        ++st.cache_hits;
        return b;
      }
    }
    for (auto& h : streams) {  // then any stream's, newest first, where its gates allow
      auto& list = h.small[ci];
      for (std::size_t i = list.size(); i-- > 0;) {
        auto ok = claim(*list[i], on, op);
        if (!ok) return std::move(ok).error();
        if (!*ok) continue;
        block* b = list[i];
        list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
        --st.cached_blocks;
        ++st.cache_hits;
        return b;
      }
    }
    // A new segment of this class on `on`.
    auto s = stitch(1, op);
    if (!s) return std::move(s).error();
    auto g = std::make_unique<segment>();
    g->memory = std::move(*s);
    g->class_index = ci;
    g->slots = chunk / class_sizes[ci];
    auto& list = bins(on).small[ci];
    for (std::size_t i = g->slots; i-- > 0;) {
      auto b = std::make_unique<block>();
      b->ptr = g->memory.range.at(i * class_sizes[ci]);
      b->size = class_sizes[ci];
      b->home = on;
      b->seg = g.get();
      b->class_index = ci;
      g->members.push_back(b.get());
      if (i > 0) {
        list.push_back(b.get());
        ++st.cached_blocks;
      }
      blocks.emplace(b->ptr, std::move(b));
    }
    block* first = g->members.back();
    segments.push_back(std::move(g));
    return first;
  }

  /// Cuts a claimed large block to `bytes`: the rest (whole chunks, same region) is cached on its new home
  /// stream, ordered after what the claim waited for.
  void split(block& b, std::size_t bytes) {
    auto tail = std::make_unique<block>();
    tail->ptr = static_cast<char*>(b.ptr) + bytes;
    tail->size = b.size - bytes;
    tail->home = b.home;
    tail->reg = b.reg;
    const auto keep = static_cast<std::ptrdiff_t>(bytes / chunk);
    tail->chunks.assign(std::make_move_iterator(b.chunks.begin() + keep), std::make_move_iterator(b.chunks.end()));
    b.chunks.erase(b.chunks.begin() + keep, b.chunks.end());
    b.size = bytes;
    tail->prev = &b;
    tail->next = b.next;
    if (b.next) b.next->prev = tail.get();
    b.next = tail.get();
    auto& h = bins(b.home);
    tail->free_seq = ++h.free_counter;
    h.large.emplace(tail->size, tail.get());
    ++st.cached_blocks;
    blocks.emplace(tail->ptr, std::move(tail));
  }
  void uncache_large(block& b) {
    auto& map = bins(b.home).large;
    for (auto it = map.lower_bound(b.size); it != map.end() && it->first == b.size; ++it)
      if (it->second == &b) {
        map.erase(it);
        --st.cached_blocks;
        return;
      }
  }
  /// Caches a freed large block, merged with its free neighbours of the same home stream (none with a pending
  /// cross-stream free): what PyTorch's allocator does within a segment, at chunk granularity.
  void cache_large(block* b) {
    auto mergeable = [&](block* n) {
      return n && !n->live && !n->cross && !b->cross && n->home.native_handle() == b->home.native_handle();
    };
    auto absorb = [&](block& into, block& gone) {  // gone follows into
      uncache_large(gone);
      into.size += gone.size;
      for (auto& c : gone.chunks) into.chunks.push_back(std::move(c));
      into.next = gone.next;
      if (gone.next) gone.next->prev = &into;
      into.free_seq = std::max(into.free_seq, gone.free_seq);
      blocks.erase(gone.ptr);
    };
    if (mergeable(b->prev)) {  // b is counted as cached by the caller: it stands for the merged block
      block* p = b->prev;
      uncache_large(*p);
      absorb(*p, *b);
      b = p;
    }
    if (mergeable(b->next)) absorb(*b, *b->next);
    bins(b->home).large.emplace(b->size, b);
  }

  /// Cached large blocks whose cross-stream free has completed lose their gate and merge with their neighbours
  /// (a gated block merges with nothing). Runs on a miss, before stitching. True when any merged.
  bool settle_cross_frees() {
    std::vector<void*> settled;
    for (auto& h : streams)
      for (auto& [size, b] : h.large)
        if (b->cross && complete(b->cross, false)) settled.push_back(b->ptr);
    bool merged = false;
    for (void* at : settled) {
      auto it = blocks.find(at);  // an earlier merge may have absorbed it (its gate was done too)
      if (it == blocks.end() || !it->second->cross) continue;
      block* b = it->second.get();
      uncache_large(*b);
      drop(b->cross);
      ++st.cached_blocks;  // cache_large expects the block counted, as deallocate leaves it
      const std::size_t before = b->size;
      cache_large(b);
      merged = merged || blocks.count(at) == 0 || it->second->size != before;
    }
    return merged;
  }

  result<block*> large_block(std::size_t bytes, stream_ref on, const detail::operation& op) {
    auto from = [&](std::multimap<std::size_t, block*>& map) -> result<block*> {
      for (auto it = map.lower_bound(bytes); it != map.end(); ++it) {  // the smallest that fits, split
        auto ok = claim(*it->second, on, op);
        if (!ok) return std::move(ok).error();
        if (!*ok) continue;
        block* b = it->second;
        map.erase(it);
        --st.cached_blocks;
        ++st.cache_hits;
        if (b->size > bytes) split(*b, bytes);
        return b;
      }
      return static_cast<block*>(nullptr);
    };
    auto got = from(bins(on).large);
    if (!got || *got) return got;
    for (auto& h : streams) {
      got = from(h.large);
      if (!got || *got) return got;
    }
    if (settle_cross_frees()) {  // merged blocks may fit now
      for (auto& h : streams) {
        got = from(h.large);
        if (!got || *got) return got;
      }
    }
    auto s = stitch(bytes / chunk, op);
    if (!s) return std::move(s).error();
    regions.push_back(std::make_unique<region>());
    region* r = regions.back().get();
    r->range = std::move(s->range);
    r->mapped = s->chunks.size();
    auto b = std::make_unique<block>();
    b->ptr = r->range.address();
    b->size = bytes;
    b->home = on;
    b->reg = r;
    b->chunks = std::move(s->chunks);
    block* raw = b.get();
    blocks.emplace(raw->ptr, std::move(b));
    return raw;
  }

  result<block*> find_or_make(std::size_t size, stream_ref on, const detail::operation& op) {
    if (size <= options.small_limit) return small_block(class_of(size), on, op);
    auto bytes = detail::checked_round_up(size, chunk);
    if (!bytes) return op.fail(errc::out_of_memory, "the size rounded up to whole chunks exceeds the address space");
    return large_block(*bytes, on, op);
  }

  /// Synchronizes the cache's pending frees and gives back every cached block and idle chunk (trim, pressure,
  /// teardown). `op` null: teardown, errors ignored.
  status give_back_everything(bool blocking, const detail::operation* op) {
    const detail::operation quiet{"pvmm::caching_allocator::~caching_allocator"};
    const detail::operation& o = op ? *op : quiet;
    auto enough = dissolve_large(static_cast<std::size_t>(-1), blocking, o);
    if (!enough && op) return std::move(enough).error();
    if (auto ok = dissolve_segments(blocking, o); !ok && op) return ok;
    release_idle_chunks();
    return {};
  }
};

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
  (void)state_->give_back_everything(true, nullptr);
  // Blocks still allocated keep their memory mapped: never unmapped under the caller (invariant 17).
  (void)state_.release();
}

int caching_allocator::device() const noexcept { return state_ ? state_->options.device : -1; }
std::size_t caching_allocator::chunk_size() const noexcept { return state_ ? state_->chunk : 0; }

result<caching_allocator> caching_allocator::create(const caching_options& options) {
  auto args = [&] {
    return fmt::format("device={}, chunk_size={:#x}, small_limit={:#x}, max_reserved={:#x}", options.device,
                       options.chunk_size, options.small_limit, options.max_reserved);
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
  std::size_t chunk = options.chunk_size ? options.chunk_size : std::max(g->recommended, *unit);
  if (chunk % g->minimum != 0 || chunk % *unit != 0)
    return op.fail(errc::unaligned,
                   fmt::format("chunk_size is not a multiple of the granularity {:#x} and the reservation unit {:#x}",
                               g->minimum, *unit));
  if (options.small_limit > chunk || options.small_limit < detail::caching::min_block)
    return op.fail(errc::invalid_argument,
                   fmt::format("small_limit must lie in [{:#x}, chunk_size {:#x}]", detail::caching::min_block, chunk));
  auto s = std::make_unique<state>();
  s->options = options;
  s->chunk = chunk;
  s->grant = access_descriptor{location::device(options.device), access::read_write};
  for (std::size_t c = detail::caching::min_block; c <= options.small_limit; c = detail::caching::class_size(c + 1))
    s->class_sizes.push_back(c);
  if (s->class_sizes.empty() || s->class_sizes.back() < options.small_limit)
    s->class_sizes.push_back(detail::caching::class_size(options.small_limit));
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
  std::lock_guard<std::mutex> hold(s.lock);
  auto b = s.find_or_make(size, on, op);
  if (!b && b.code() == errc::out_of_memory) {
    // Pressure: wait for every pending free, give the whole cache back and try once more.
    ++s.st.pressure_retries;
    if (auto ok = s.give_back_everything(true, &op); !ok) return std::move(ok).error();
    b = s.find_or_make(size, on, op);
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
  auto it = s.blocks.find(pointer);
  if (it == s.blocks.end() || !it->second->live)
    return op.fail(errc::invalid_argument, it == s.blocks.end()
                                               ? "the pointer was not returned by this allocator's allocate"
                                               : "the pointer was already given back");
  auto& b = *it->second;
  if (on.native_handle() != b.home.native_handle()) {
    auto f = s.record_fence(on, op);
    if (!f) return std::move(f).error();
    b.cross = *f;
  }
  auto& h = s.bins(b.home);
  b.free_seq = ++h.free_counter;
  b.live = false;
  --s.st.live_blocks;
  s.st.live -= b.requested;
  ++s.st.cached_blocks;
  if (b.seg) {
    --b.seg->busy;
    h.small[b.class_index].push_back(&b);
  } else {
    s.cache_large(&b);
  }
  return {};
}

status caching_allocator::trim() {
  const detail::operation op{"pvmm::caching_allocator::trim"};
  if (!state_) return op.fail(errc::already_released, "this caching_allocator is empty (released or moved from)");
  std::lock_guard<std::mutex> hold(state_->lock);
  return state_->give_back_everything(true, &op);
}

caching_stats caching_allocator::stats() const noexcept {
  if (!state_) return {};
  std::lock_guard<std::mutex> hold(state_->lock);
  return state_->st;
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
    if (auto ok = state_->give_back_everything(true, &op); !ok) return ok;
  }
  state_.reset();
  return {};
}

}  // namespace pvmm
