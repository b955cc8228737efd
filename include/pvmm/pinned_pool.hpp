// pvmm/pinned_pool.hpp - a pool of page-locked host memory for staging buffers: allocate a block, write it from the
// host, copy it to (or from) a device on a stream, give it back; the next allocate of that size reuses it once the
// copy has completed, without a driver call or a synchronize (PyTorch's CachingHostAllocator does the same).
//
// Semantics (every backend):
// - allocate(size) gives `size` bytes (> 0) of page-locked memory the host may read and write at once: no work of
//   an earlier use of the block is pending. It takes no stream: handing the block out is not stream-ordered;
// - deallocate(p, s) gives the block back in s's order, where s is the stream of its last use (work enqueued on s
//   before the call may still read or write it). An event is recorded on s at the call, and the block is handed
//   out again (to any caller, on any stream) only once the host has seen that event complete (an event query or
//   a synchronize): never on hope, even on s itself, because the next user writes it from the host, which stream
//   order does not cover. A block used on several streams: make s wait for the others first (stream_ref::wait);
// - a block whose event has not completed is passed over and another one is made: a staging loop reuses as many
//   blocks as it has copies in flight;
// - trim() waits for the events of cached blocks and gives every cached block back to where it came from;
//   allocations that fail for want of memory trim and retry once;
// - stats(): reserved = bytes of blocks held (allocated and cached); live = bytes asked for by allocated blocks.
//
// Where blocks come from (pinned_pool::source()):
// - pinned_source::driver_pool where the device has pools of host memory (capabilities.pools.host_location: CUDA
//   12.6+ drivers with host memory pools, and the host backend): one host-located memory_pool (release threshold
//   UINT64_MAX, the device granted read_write), allocated from on the pinned pool's own stream, which is
//   synchronized before the block is handed out (a pool allocation is usable once its stream has reached it). A
//   block the cache gives back returns to that pool, which keeps the memory reserved for the next new block;
//   trim() also trims the driver pool to 0;
// - pinned_source::pinned_allocations elsewhere (HIP, whose pools are device-located; CUDA drivers without host
//   pools), or when asked (pinned_pool_options::driver_pool = false): one pinned_allocation per block
//   (cuMemHostAlloc, hipHostMalloc, mlock), freed when the cache gives it back.
// The driver's stream-ordered reuse alone would not do for staging: a block freed on s with a copy pending is
// handed back on s at once (stream order), while the host writes it now. The event gate above is pvmm's, on both
// sources; the driver pool only makes a new block cheap.
//
// Sizes round up to a multiple of 4 KiB and to one of 4 classes per doubling; a block is reused for requests of
// its class only.
//
// Threading: one pinned_pool may be used from several threads at once (allocate, deallocate, trim and stats take
// its one lock; the driver calls they make run under it, and no user code does). Releasing, moving or destroying
// it may not overlap any other use. Every stream passed to deallocate must outlive the pool's use of its event:
// until the block is reused or trimmed (events are the pool's own, so destroying the stream after its work has
// completed is safe).
//
// Lifetime: release() refuses with errc::busy while blocks are allocated. The destructor waits for the cached
// blocks' events and gives them back; blocks still allocated stay valid (their memory is never freed under the
// caller: invariant 17) and stay counted by query_live_objects until the process ends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include <pvmm/detail/unique_owner.hpp>
#include <pvmm/error.hpp>
#include <pvmm/stream.hpp>

namespace pvmm {

/// Where a pinned_pool's blocks come from.
enum class pinned_source : std::uint8_t {
  driver_pool,         ///< a host-located memory_pool (capabilities.pools.host_location)
  pinned_allocations,  ///< one pinned_allocation per block
};

/// What a pinned pool is created with.
struct pinned_pool_options {
  int device = 0;  ///< the device that copies to and from its blocks (and whose streams deallocate takes)
  /// Take blocks from a host-located driver pool where the device has one; false: pinned allocations always.
  bool driver_pool = true;
};

/// What a pinned pool holds and has done.
struct pinned_pool_stats {
  std::uint64_t reserved = 0;       ///< bytes of blocks held, allocated or cached
  std::uint64_t live = 0;           ///< bytes asked for by blocks allocated and not given back
  std::uint64_t peak_reserved = 0;  ///< high mark of reserved since creation or reset_peaks
  std::uint64_t peak_live = 0;      ///< high mark of live
  std::uint64_t live_blocks = 0;    ///< blocks allocated and not given back
  std::uint64_t cached_blocks = 0;  ///< blocks held for reuse
  std::uint64_t cache_hits = 0;     ///< allocations served by a cached block
  std::uint64_t new_blocks = 0;     ///< allocations that made a block
  std::uint64_t passed_over = 0;    ///< cached blocks of the right size passed over: their event was pending
};

/// A pool of page-locked staging buffers. Move-only.
class pinned_pool : detail::move_only {
 public:
  pinned_pool() noexcept;  ///< empty (defined where state is complete)
  pinned_pool(pinned_pool&&) noexcept;
  pinned_pool& operator=(pinned_pool&&) noexcept;
  ~pinned_pool();

  static result<pinned_pool> create(const pinned_pool_options& options = {});

  /// `size` bytes (> 0) of page-locked memory the host may use at once, aligned to 4 KiB.
  result<void*> allocate(std::size_t size);
  /// Gives back a pointer allocate returned, in `last_use`'s order (a stream of the pool's device).
  /// errc::invalid_argument for any other pointer, one already given back, or an empty stream;
  /// errc::invalid_device for a stream of another device.
  status deallocate(void* pointer, stream_ref last_use);
  /// Waits for the cached blocks' events and gives every cached block back now.
  status trim();
  pinned_pool_stats stats() const noexcept;
  /// Sets the high marks to the current values.
  void reset_peaks() noexcept;

  /// Gives back everything now. errc::busy while blocks are allocated; errc::already_released when empty.
  status release() noexcept;

  bool valid() const noexcept { return state_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }
  int device() const noexcept;
  pinned_source source() const noexcept;

 private:
  struct state;
  explicit pinned_pool(std::unique_ptr<state> s) noexcept;
  std::unique_ptr<state> state_;
};

}  // namespace pvmm
