// pvmm/caching_allocator.hpp - a caching allocator (the engine a framework's allocator plug-in needs): one best-fit
// pool of blocks split and merged at 512 B, cross-stream reuse gated on events, free physical chunks stitched into
// contiguous ranges. The warm path (a cached block freed on the allocating stream) makes no driver call.
//
// Why it sits on VMM and not on pvmm's stream-ordered pools (docs/design.md, "Caching allocator"):
// - a pool caches too: a cache over a pool holds memory twice over and cannot hand back what the pool keeps;
//   driver pools were measured holding 2.3x the live bytes under random cross-stream frees (issue 38);
// - over VMM the allocator owns the physical memory in chunks (the device's recommended granularity, at least
//   4 MiB: caching_options::chunk_size) mapped back to back into regions (reserved ranges). When no cached block fits,
//   whole free chunks of cached blocks are stitched into a new contiguous region (GMLake's idea, ASPLOS'24) before any
//   new physical memory is created, so reserved bytes stay near live bytes;
// - every backend has VMM (host included); a device without it answers errc::not_supported at create.
//
// Semantics:
// - allocate(size, s) gives `size` bytes usable in stream s's order, aligned to 512 B. Every request rounds up to
//   a multiple of 512 B and takes the smallest cached block that fits (best fit, one pool for all sizes: the
//   fragments large blocks leave serve small requests), split at 512 B; the rest stays cached. A freed block
//   merges with its free address neighbours (PyTorch's splitting and merging, without its small/large pools: a
//   partly used chunk is what costs reserved bytes, and one pool leaves fewer). A miss first looks for a free block
//   s may use that ends its region's mapped run with enough reserved address space after it (each region reserves
//   room to grow): grown in place, only the chunks it lacks are mapped after it, where that maps fewer chunks than a
//   new region would, or as many for a request of one chunk or less (it then fills the tail's bytes rather than
//   stranding them). Else it stitches ceil(size / chunk) chunks into a new region. Either way the chunks are new
//   ones while the bytes held stay within the slack (slack_percent of the live high mark: cached blocks stay whole
//   for the requests they fit), else chunks cut out of free blocks s may use, then new ones. What the request
//   leaves is cached;
// - deallocate(p, s) gives the block back in s's order, where s is the stream of its last use; it makes no driver
//   call. s == the stream it was allocated on (its home): reusable there at once. s != home (an FSDP-style free,
//   or PyTorch's record_stream): the block waits for an event on s, recorded at the next allocation (any stream)
//   and shared by every cross-stream free on s since the last one (it covers their uses: it is queued after them);
// - a cached block is handed to a stream other than one it was used on only once the host has seen that work
//   complete (an event query, or a stream query when no event covers it; at most one of each per stream per
//   allocation), never on hope. With wait_for_pending_frees, a request no ready block fits takes a pending one
//   by making its stream wait for the event on the device (a non-blocking wait) rather than reserving more. That
//   event is recorded after the free (at the next allocation, or at the wait itself for a free on the block's
//   home stream), so the wait also covers work queued on the freeing stream between the free and that moment:
//   work there must not wait for the allocating stream's later work (set wait_for_pending_frees = false if
//   it can: reuse then waits for the host to see the event done, and never waits on the device);
// - a chunk stitched elsewhere stays mapped at its old place (a ghost, never handed out) until the host has seen
//   every use of it there complete: unmapping is not ordered with device work (invariant 4). A ghost holds no
//   physical memory (its chunk is counted once, where it is mapped now), only address space: ghosts are unmapped
//   when the cache gives back, or on a miss once they map more than max_ghost_bytes (down to it);
// - under pressure (creating a chunk failed, or max_reserved would be exceeded) the allocator synchronizes the
//   streams it has seen, unmaps every ghost and every whole chunk of its cached blocks, gives back the chunks, and
//   retries once; trim() does the same on demand. A chunk partly under a live block stays;
// - stats(): reserved = physical bytes held; live = bytes asked for by blocks not yet deallocated; high marks;
//   and the driver calls made, by kind (so a caller can check that its warm path makes none), with the time spent
//   in them (read only around those calls: the warm path reads no clock).
//
// Streams: every stream passed in must outlive the allocator (it keeps their handles: events are recorded and
// queried on them, and trim, pressure, release and the destructor synchronize each of them).
//
// Threading: one caching_allocator may be used from several threads at once (allocate, deallocate, trim, stats
// and reset_peaks take its one lock; the driver calls they make run under it, and no user code does). Releasing,
// moving or destroying it may not overlap any other use.
//
// Lifetime: release() refuses with errc::busy while blocks are allocated. The destructor gives back every cached
// block; blocks still allocated stay mapped and valid (their memory is never unmapped under the caller: invariant
// 17) and stay counted by query_live_objects until the process ends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include <pvmm/detail/unique_owner.hpp>
#include <pvmm/error.hpp>
#include <pvmm/stream.hpp>

namespace pvmm {

/// What a caching allocator is created with.
struct caching_options {
  int device = 0;  ///< the device whose memory it hands out (and whose streams it accepts)
  /// Physical chunk: 0 = the device's recommended granularity, at least 4 MiB (4 MiB on CUDA and the host backend):
  /// a stitch grants access in one call over its whole range, but on a GPU that grant costs tens of microseconds per
  /// chunk mapped in it.
  std::size_t chunk_size = 0;
  std::size_t max_reserved = 0;  ///< physical bytes it may hold at most; 0: no limit beyond the device's
  /// When no cached block is ready for a request, take one whose earlier use on another stream is still pending
  /// (or its chunks, for a stitch) by making the allocating stream wait on the device (not a host wait) for an
  /// event recorded on that stream after the free, rather than creating more memory: the wait covers the work
  /// queued there up to the event too (see the contract above). false: such blocks wait until the host sees the
  /// event done.
  bool wait_for_pending_frees = true;
  /// Hysteresis against map/unmap churn: a miss creates new chunks rather than cutting chunks out of cached
  /// blocks (mapped again, later unmapped at their old place) while the bytes held stay within slack_percent of
  /// the high mark of live bytes above that mark (at least two chunks above it). 0: cached blocks are cut first.
  /// It trades memory for speed on every miss, a region grown in place included: at 25 the allocation traces of
  /// docs/performance.md run ahead of PyTorch's allocator on all seven while holding less than it; at 8 the bytes
  /// held stay within 1.08x of the live high mark.
  unsigned slack_percent = 8;
  /// Address space the ghosts may map (chunks stitched elsewhere and still mapped at their old place: no
  /// physical memory of their own, only address space and page-table entries) before a miss unmaps those the
  /// host has seen complete, down to it. 0: max(4 x reserved, 16 GiB). Giving back unmaps them all.
  std::size_t max_ghost_bytes = 0;
  /// A miss whose request a cached block at the end of its region's mapped run would fit once grown maps only the
  /// chunks it lacks after it (each region reserves address space to grow into) rather than a new region of every
  /// chunk the request needs. false: every miss stitches a new region (C: pvmm_caching_options::grow_in_place,
  /// Python: CachingAllocator(grow_in_place=...)).
  bool grow_in_place = true;
};

/// What a caching allocator holds and has done.
struct caching_stats {
  std::uint64_t reserved = 0;          ///< physical bytes held (chunks, mapped or idle)
  std::uint64_t live = 0;              ///< bytes asked for by blocks allocated and not deallocated
  std::uint64_t peak_reserved = 0;     ///< high mark of reserved since creation or reset_peaks
  std::uint64_t peak_live = 0;         ///< high mark of live
  std::uint64_t live_blocks = 0;       ///< blocks allocated and not deallocated
  std::uint64_t cached_blocks = 0;     ///< blocks held for reuse
  std::uint64_t cache_hits = 0;        ///< allocations served by a cached block
  std::uint64_t stitches = 0;          ///< misses that mapped chunks: a region built, or one grown in place
  std::uint64_t chunks_reused = 0;     ///< chunks of a stitch that were held already (idle, or unmapped for it)
  std::uint64_t waits = 0;             ///< reuses that made a stream wait for a pending free
  std::uint64_t pressure_retries = 0;  ///< allocations retried after giving back the cache
  // Driver calls, by kind:
  std::uint64_t chunks_created = 0;  ///< physical chunks created
  std::uint64_t maps = 0;            ///< chunk mappings (one per chunk a stitch or a growth maps)
  std::uint64_t unmaps = 0;          ///< unmap calls (one per chunk: ghosts past max_ghost_bytes, give-back)
  std::uint64_t event_records = 0;   ///< events recorded (cross-stream frees: one a stream an allocation; fences)
  std::uint64_t event_queries = 0;   ///< event and stream queries
  std::uint64_t device_waits = 0;    ///< stream waits for an event (non-blocking for the host)
  std::uint64_t host_syncs = 0;      ///< host waits for a stream (trim, pressure, release, teardown)
  std::uint64_t ghost_bytes = 0;     ///< address space the ghosts map now
  // Time spent in those calls, ns (steady clock, read only around them: never on the warm path):
  std::uint64_t stitch_ns = 0;        ///< stitches: the reserve, the maps and the grant
  std::uint64_t unmap_ns = 0;         ///< unmaps
  std::uint64_t create_ns = 0;        ///< chunks created
  std::uint64_t event_record_ns = 0;  ///< events recorded (and created)
  std::uint64_t event_query_ns = 0;   ///< event and stream queries
  std::uint64_t device_wait_ns = 0;   ///< stream waits for an event
};

/// A caching allocator of one device's memory. Move-only.
class caching_allocator : detail::move_only {
 public:
  caching_allocator() noexcept;  ///< empty (defined where state is complete)
  caching_allocator(caching_allocator&&) noexcept;
  caching_allocator& operator=(caching_allocator&&) noexcept;
  ~caching_allocator();

  static result<caching_allocator> create(const caching_options& options = {});

  /// `size` bytes (> 0), usable in `on`'s order, aligned to at least 512 bytes.
  result<void*> allocate(std::size_t size, stream_ref on);
  /// Gives back a pointer allocate returned, in `on`'s order (the stream of its last use). errc::invalid_argument
  /// for any other pointer, one already given back, or an empty stream.
  status deallocate(void* pointer, stream_ref on);
  /// Gives back every cached block and idle chunk now, waiting (host) for their pending frees first.
  status trim();
  caching_stats stats() const noexcept;
  /// The bytes asked for by the live block starting at `pointer`; 0 when it is none of this allocator's live blocks
  /// (what a plug-in that serves several sources asks to route a free).
  std::size_t size_of(const void* pointer) const noexcept;
  /// Sets the high marks to the current values.
  void reset_peaks() noexcept;

  /// Gives back everything now. errc::busy while blocks are allocated; errc::already_released when empty.
  status release() noexcept;

  bool valid() const noexcept { return state_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }
  int device() const noexcept;
  std::size_t chunk_size() const noexcept;

 private:
  struct state;
  explicit caching_allocator(std::unique_ptr<state> s) noexcept;
  std::unique_ptr<state> state_;
};

}  // namespace pvmm
