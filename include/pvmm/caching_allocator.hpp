// pvmm/caching_allocator.hpp - a caching allocator (the engine a framework's allocator plug-in needs): per-stream
// size classes, cross-stream reuse gated on events, physical chunks stitched into contiguous ranges.
//
// Why it sits on VMM and not on pvmm's stream-ordered pools (docs/design.md, "Caching allocator"):
// - a pool caches too: a cache over a pool holds memory twice over and cannot hand back what the pool keeps;
//   driver pools were measured holding 2.3x the live bytes under random cross-stream frees (issue 38);
// - over VMM the allocator owns the physical memory in chunks (the device's recommended granularity, 2 MiB on
//   CUDA): a large block is chunks mapped back to back into its own reserved range, and when no cached block fits,
//   idle chunks of other cached blocks are unmapped and stitched into a new contiguous range (GMLake's idea,
//   ASPLOS'24) instead of reserving more physical memory. Reserved bytes stay near live bytes;
// - every backend has VMM (host included); a device without it answers errc::not_supported at create.
//
// Semantics:
// - allocate(size, s) gives `size` bytes usable in stream s's order (s is the block's home stream). Requests up
//   to small_limit come from per-stream size classes (4 per doubling, multiples of 512 B) carved from one-chunk
//   segments; larger ones are whole chunks: the smallest cached block that fits is split at a chunk boundary (no
//   driver call), and a freed block merges with its free neighbours of the same home stream (PyTorch's segment
//   splitting, at chunk granularity);
// - deallocate(p, s) gives the block back in s's order, where s is the stream of its last use. s == home: the block
//   is reusable on its home stream at once (stream order). s != home (an FSDP-style free on another stream): an
//   event is recorded on s at the free, and the home stream reuses the block only once that event has completed,
//   or, with wait_for_pending_frees, after enqueuing a wait for it: never on hope;
// - another stream takes a cached block only after an event recorded on the block's home stream after its free
//   (and its cross-stream event, if any) has completed, or with wait_for_pending_frees, by waiting for them;
// - physical memory is unmapped only when the host has seen every use of it complete (an event query answering
//   done, or a synchronize): unmapping is not ordered with device work (invariant 4);
// - under pressure (creating a chunk failed, or max_reserved would be exceeded) the allocator synchronizes the
//   events of its cached blocks, gives back every cached block and idle chunk, and retries once; trim() does the
//   same on demand;
// - stats(): reserved = physical bytes held; live = bytes asked for by blocks not yet deallocated; high marks.
//
// Streams: every stream passed in must outlive the allocator, or be idle and never passed again once the
// caller destroys it (cached blocks keep its handle to record events on).
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
  int device = 0;              ///< the device whose memory it hands out (and whose streams it accepts)
  std::size_t chunk_size = 0;  ///< physical chunk: 0 = the device's recommended granularity (2 MiB on CUDA)
  std::size_t small_limit = std::size_t{1} << 20;  ///< requests up to this come from size classes (<= chunk_size)
  std::size_t max_reserved = 0;  ///< physical bytes it may hold at most; 0: no limit beyond the device's
  /// Reuse a cached block whose free is still pending by making the allocating stream wait for it (an event
  /// wait, on the device) rather than reserving more memory. false: such blocks wait until their event is done.
  bool wait_for_pending_frees = true;
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
  std::uint64_t stitches = 0;          ///< ranges built from chunks (a new block or segment)
  std::uint64_t chunks_reused = 0;     ///< chunks taken from dissolved blocks into a stitch
  std::uint64_t waits = 0;             ///< reuses that made a stream wait for a pending free
  std::uint64_t pressure_retries = 0;  ///< allocations retried after giving back the cache
};

/// A caching allocator of one device's memory. Move-only.
class caching_allocator : detail::move_only {
 public:
  caching_allocator() noexcept = default;
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
