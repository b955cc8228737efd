// pvmm/snapshot.hpp - everything pvmm holds in this process, as PyTorch's memory visualizer reads it.
//
// take_memory_snapshot() describes, at one moment, every range of memory pvmm made or imported: VMM reservations
// and their mappings (imported physical memory and multicast objects marked), memory pools' allocations, managed,
// pinned and registered host memory, and what the owners built on them add (team windows, the caching allocator's
// blocks, the sleeping allocator's tags). write_snapshot() writes it as the pickle `torch.cuda.memory._snapshot()`
// returns, so `python -m torch.cuda._memory_viz segment_plot|trace_plot file -o out.html` and
// pytorch.org/memory_viz show memory PyTorch's own snapshots cannot see (cuMemCreate, pools, pinned memory).
//
// The schema (PyTorch's "Understanding CUDA Memory Usage"; what MemoryViz.js and _memory_viz.py read):
//   {"segments": [Segment], "device_traces": [[TraceEntry] for device 0, 1, ...], "allocator_settings": {}}
//   Segment = {"device", "address", "total_size", "allocated_size", "active_size", "requested_size", "stream",
//              "segment_type": "large", "segment_pool_id": (a, b), "is_expandable", "frames": [], "blocks": [Block],
//              "pvmm_kind": what pvmm calls it, "pvmm_label": who holds it (may be "")}
//   Block   = {"address", "size", "requested_size", "state": "active_allocated" | "active_awaiting_free" |
//              "inactive", "frames": [], "pvmm_label"}
//   TraceEntry = {"action", "addr", "size", "stream", "time_us", "frames": [], "device_free": 0}
// A segment's blocks tile it exactly: their sizes sum to total_size (_memory_viz's segsum asserts it). Unmapped
// parts of a reservation and cached blocks are "inactive"; a caching-allocator block freed on another stream whose
// work may still use it is "active_awaiting_free". Host memory (pinned, registered) has device -1: the visualizer
// plots one device at a time and leaves it out; the segment list has it.
//
// History: record_memory_history(n) keeps the last n allocate/free events (a ring; 0, the default, turns it off).
// Off, each recording site costs one relaxed load. Events: "segment_alloc"/"segment_free" (reserve/free of a range,
// a pool allocation, pinned memory), "segment_map"/"segment_unmap", "alloc"/"free_requested"/"free_completed" (a
// caching-allocator block), "snapshot" (each take_memory_snapshot).
//
// Threading: any thread. A snapshot is a consistent view of each range (taken under that range's lock), not of the
// whole process at once: a range another thread frees meanwhile is in it or not. Taking one calls no user code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <pvmm/error.hpp>

namespace pvmm {

/// A block's state, as PyTorch names them.
enum class block_state : std::uint8_t { active_allocated, active_awaiting_free, inactive };

struct snapshot_block {
  std::uintptr_t address = 0;
  std::size_t size = 0;            ///< bytes it occupies
  std::size_t requested_size = 0;  ///< bytes asked for (0 where inactive)
  block_state state = block_state::inactive;
  std::string label;  ///< what pvmm knows of it ("mapping of imported memory at offset 0x0", a sleeping tag, ...)
};

struct snapshot_segment {
  int device = -1;  ///< the device whose memory it is; -1 for host memory
  std::uintptr_t address = 0;
  std::size_t total_size = 0;
  std::uintptr_t stream = 0;  ///< the stream it belongs to where one does (native handle value), else 0
  /// reservation, pool, managed, pinned, registered, caching, caching_ghost, window, sleeping
  std::string kind;
  std::string label;                   ///< who holds it (a team window, a sleeping tag, ...); may be empty
  std::int64_t pool_id[2] = {0, 0};    ///< PyTorch's segment_pool_id: pools and allocators number theirs from 1
  bool is_expandable = false;          ///< a range the owner maps in pieces (reservations, caching regions)
  std::vector<snapshot_block> blocks;  ///< tile the segment exactly, in address order
  std::size_t allocated_size() const noexcept;  ///< sum of active_allocated blocks' sizes
  std::size_t active_size() const noexcept;     ///< sum of active (allocated or awaiting free) blocks' sizes
  std::size_t requested_size() const noexcept;  ///< sum of the active blocks' requested sizes
};

struct trace_entry {
  std::string action;  ///< "alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", ...
  std::uintptr_t address = 0;
  std::size_t size = 0;
  std::uintptr_t stream = 0;
  std::int64_t time_us = 0;  ///< microseconds since the Unix epoch
};

struct memory_snapshot {
  std::vector<snapshot_segment> segments;
  /// device_traces[d]: the recorded events of device d, oldest first (host memory's events go to device 0's list).
  std::vector<std::vector<trace_entry>> device_traces;
};

/// What this process holds through pvmm now, plus the recorded history. errc::out_of_memory when memory for the
/// description itself ran out. First lets go of what finished stream work held (a window released while signal
/// work was queued on it), as query_live_objects does: that may tear the window down on this thread.
result<memory_snapshot> take_memory_snapshot();

/// The snapshot as the bytes of a pickle (protocol 2) of PyTorch's snapshot dictionary.
result<std::string> snapshot_pickle(const memory_snapshot& snapshot);
/// Writes snapshot_pickle(snapshot) to `path` (created or truncated). errc::invalid_argument for an empty path; a
/// failed open or write is errc::backend_error naming the path and the system's reason.
status write_snapshot(const memory_snapshot& snapshot, const std::string& path);
/// take_memory_snapshot, then write_snapshot.
status dump_snapshot(const std::string& path);

/// Keeps the last `max_entries` allocate/free events from now on (dropping what was kept); 0 turns recording off
/// and drops them. errc::invalid_argument above 1 << 24 entries.
status record_memory_history(std::size_t max_entries);
/// The ring's capacity now (0: off).
std::size_t memory_history_capacity() noexcept;

/// Tools that check user code: with `on`, the caching allocator registers each chunk it maps as an NVTX memory heap
/// (one per mapping) and each block it hands out as regions of the size asked for, one per chunk the block covers
/// (nvtxMemHeapRegister, nvtxMemRegionsRegister), so `compute-sanitizer --tool memcheck` reports a kernel that
/// touches a byte outside every live block (past its end, or after its free), which the mapping alone hides.
/// compute-sanitizer takes NVTX calls only once the CUDA runtime is initialized (cudaFree(0) before the first
/// allocation; pvmm itself uses the driver API only). Applies to regions mapped from then on. Off by default
/// (PVMM_NVTX_MEMORY=1 in the environment switches it on at load); off, it costs one relaxed load per region
/// mapped and one predictable branch per block. errc::not_supported for `on` in a build without NVTX (only the CUDA
/// backend has it).
status register_with_nvtx(bool on);
/// Whether NVTX registration is on.
bool nvtx_registration() noexcept;

}  // namespace pvmm
