// pvmm/memory_pool.hpp - stream-ordered memory pools: allocate and free in stream order from a pool of device
// memory that keeps what it reserved (cuMemPool*, hipMemPool*; the host backend's pools are real suballocators).
//
// Portable semantics (every backend):
// - an allocation is usable by work enqueued after allocate on its stream; free_async frees it in stream order;
// - reuse of a block freed on stream s1 by an allocation on another stream s2 follows the rules CUDA 13.0 and
//   HIP-on-NVIDIA were measured to follow (driver 580; tools/probes/README.md, pool_reuse), on every backend:
//   1. a free the host has seen complete through a blocking synchronisation (stream or event synchronize) is
//      reusable on every stream under every policy setting, all off included; a query answering "done" does not
//      count;
//   2. a free that has completed but that the host has not seen that way is reused on s2 only with
//      reuse_opportunistic;
//   3. a free that s2 is ordered after (s2 waited for an event recorded on s1 after the free) is reused with
//      reuse_follow_event_dependencies, even while it is still pending (s2's work runs after it);
//   4. a pending free that s2 is not ordered after is never handed to s2 while the pool can grow, whatever the
//      policies (reuse_internal_dependencies changed nothing measured). Where the pool cannot grow (max_size
//      reached) the host backend lets reuse_internal_dependencies hand it over with a wait on s1 added to s2; not
//      verified on the drivers (the probe could not fill a pool);
//   5. s1 always reuses its own frees (stream order), and gets back what s2 did not take.
//   A reused block is handed out at the same address; which block s2 gets otherwise is not promised;
// - usage(): reserved >= used; high marks >= current marks (a reset sets high to current on every backend);
// - a pool reserves memory in 32 MiB chunks (a smaller pool: one chunk of its size) and gives back whole chunks,
//   as the drivers' pools do (tools/probes/pool_chunks.cpp): at a synchronize (stream, event) unused chunks go
//   while more than the release threshold is reserved (a threshold of 40 MiB over 96 MiB unused keeps 32);
//   trim_to(keep) gives back unused chunks now while keeping at least `keep` bytes reserved;
// - a pool lives while its owner or any of its allocations does (raw ones from allocate_async included): releasing
//   or destroying the owner with allocations left defers, and the pool goes when the last one is freed (as
//   cuMemPoolDestroy / hipMemPoolDestroy defer); its raw pointers stay valid and are freed with pvmm::free_async.
//
// Sharing between processes (pools created with exportable = handle_types::posix_fd):
// - the exporter exports the pool first (export_posix_fd, sent with ipc::send_pool), then, per allocation, a
//   pool_pointer_export (plain bytes, sent as they are); the importer imports the pool once (import_posix_fd) and each
//   pointer into it (import_pointer);
// - an imported pool cannot allocate, cannot be exported again, and accepts only pointers exported from the pool it
//   was imported from (pvmm checks the pool's identity before the driver, on every backend);
// - the exporter's allocation must be complete (synchronize) before the importer uses it, and the importer frees
//   before the exporter does. No backend can see the second rule across processes (the host backend keeps nothing
//   a peer could forge decide the exporter's frees: invariant 16), so it is the caller's: the exporter's free is
//   never refused. The host backend refuses a stale or altered pointer export with errc::invalid_handle;
// - importing the same pointer twice in one process is refused with errc::busy and leaves the first import intact
//   (the drivers return the same pointer without counting imports);
// - exporter death: on the host backend an imported pool and its imported pointers stay readable and writable after
//   the exporting process dies (before or after the import), with the exporter's data, and are freed and released
//   without error (sharing/exporter_death.cpp). CUDA and HIP on NVIDIA (driver 580, H100; tools/probes/exporter_death)
//   do the same: the imported pool and pointer, imported before or after the exporter's SIGKILL, read the
//   exporter's data and free and release without error. HIP on AMD is not measured: there, keep the exporter alive
//   until every importer has freed.
//
// Threading: one memory_pool may be used from several threads at once (allocate, free_async, usage, attributes,
// trim, export and import are locked where they touch shared state). One pool_allocation's const members (data,
// size, export_pointer) may be called from several threads at once; free_async, release, moving and destroying
// it may not overlap any other use of it. Releasing, moving or destroying a memory_pool may not overlap its use.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <type_traits>

#include <pvmm/detail/handle_value.hpp>
#include <pvmm/detail/unique_owner.hpp>
#include <pvmm/error.hpp>
#include <pvmm/ipc.hpp>
#include <pvmm/owned_fd.hpp>
#include <pvmm/stream.hpp>
#include <pvmm/types.hpp>

namespace pvmm {

namespace detail {
struct pool_state;
}

/// The backend's handle of a pool (CUmemoryPool, hipMemPool_t, the host backend's pool) as an integer.
struct pool_handle : detail::handle_value<pool_handle> {};

/// A pool's identity: random, made when an exportable pool is created, carried by its exports (all zero for a
/// pool that cannot be exported).
struct pool_id {
  std::array<std::uint8_t, 16> bytes{};
  friend bool operator==(const pool_id& a, const pool_id& b) noexcept { return a.bytes == b.bytes; }
  friend bool operator!=(const pool_id& a, const pool_id& b) noexcept { return !(a == b); }
};

/// A pool exported for another process: its fd (owned) and its identity. ipc::send_pool sends both.
struct pool_export {
  owned_fd fd;
  pool_id id;
};

/// One pool allocation exported for a process that imported its pool: plain bytes, to send as they are.
struct pool_pointer_export {
  std::array<std::uint8_t, 64> data{};  ///< the driver's record (CUmemPoolPtrExportData, hipMemPoolPtrExportData)
  std::uint64_t size = 0;               ///< the allocation's size in bytes
  pool_id pool;                         ///< the pool it belongs to
};
static_assert(std::is_trivially_copyable_v<pool_pointer_export>, "sent as bytes");

/// What a pool is created with.
struct pool_properties {
  pvmm::location location = pvmm::location::device(0);  ///< where its memory lives (capabilities.pools)
  std::size_t max_size = 0;                             ///< bytes it may reserve at most; 0: no limit
  /// handle_types::posix_fd makes the pool exportable (capabilities.pools.ipc_posix_fd; device-located pools only,
  /// as CUDA's host pools cannot be shared).
  handle_types exportable = handle_types::none;
  /// Reserved bytes above this go back at a synchronize. pvmm's default keeps everything (as RMM, cuda.core,
  /// PyTorch and CCCL set it): the drivers' default, 0, gives all free memory back at every synchronize, which
  /// makes a pool no faster than a plain allocation. Use 0 for that behaviour.
  std::uint64_t release_threshold = std::numeric_limits<std::uint64_t>::max();
  /// Reuse memory freed on a stream this one waited for (an event recorded after the free), even before the free
  /// has run (rule 3 of "Portable semantics").
  bool reuse_follow_event_dependencies = true;
  /// Reuse memory whose free has completed, on any stream, though no synchronize saw it (rule 2).
  bool reuse_opportunistic = true;
  /// The driver may add a wait on another stream's pending free to reuse its memory: measured to change nothing
  /// while the pool can grow (rule 4); the host backend uses it only when the pool would exceed max_size.
  bool reuse_internal_dependencies = true;
};

/// A pool's attributes that may change after creation (cuMemPoolGetAttribute / SetAttribute, hipMemPool*): read
/// back exactly as set, on every backend.
struct pool_attributes {
  std::uint64_t release_threshold = std::numeric_limits<std::uint64_t>::max();
  bool reuse_follow_event_dependencies = true;
  bool reuse_opportunistic = true;
  bool reuse_internal_dependencies = true;
};

/// Bytes a pool holds: reserved from the system, and in use by allocations; with their high marks.
struct pool_usage {
  std::uint64_t reserved_current = 0;
  std::uint64_t reserved_high = 0;
  std::uint64_t used_current = 0;
  std::uint64_t used_high = 0;
};

class memory_pool;

/// Owns one allocation from a pool. Move-only. free_async(stream) frees it in that stream's order. The
/// destructor of an allocation not freed explicitly never touches the stream it was allocated on (borrowed: it may
/// be gone, e.g. when Python destroys the stream first): it frees on the pool's own stream, which the allocation
/// keeps alive with its pool. As for every owner's destructor, work still using the memory must have completed
/// (or been ordered before the free: free_async on that stream does both).
namespace detail {
/// What a pool allocation keeps besides its region: its pool (alive while the allocation is, with the pool's own
/// stream the destructor frees on) and the stream it was allocated on (release() frees there).
struct pool_tie {
  std::shared_ptr<pool_state> pool_;
  stream_ref stream_;
};
}  // namespace detail

class pool_allocation
    : public detail::unique_owner<pool_allocation, detail::region_holder<pool_allocation, detail::pool_tie>> {
 public:
  pool_allocation() noexcept = default;

  /// Frees in `on`'s order (work enqueued on `on` before this call may still use the memory). On failure the
  /// allocation stays owned here, so the call may be retried. errc::already_released when empty.
  status free_async(stream_ref on) noexcept;
  /// free_async on the stream it was allocated on (which must still exist for this call, unlike the destructor):
  /// pvmm's "give it back now, reporting errors" for every owner.
  status release() noexcept;

  /// The record another process imports this allocation with (its pool must be exportable; synchronize first,
  /// as memory_pool::export_pointer says).
  result<pool_pointer_export> export_pointer() const;

 private:
  friend class memory_pool;
  friend unique_owner;
  pool_allocation(std::shared_ptr<detail::pool_state> pool, void* data, std::size_t size, stream_ref s) noexcept
      : unique_owner(std::in_place, data, size, detail::pool_tie{std::move(pool), s}) {}
  static status free_in_order(holder& region, stream_ref on, bool teardown, const char* name) noexcept;
  static void teardown(holder& region) noexcept;
};

/// A stream-ordered memory pool: one pvmm created (owned), or a device's default pool (borrowed). Move-only.
class memory_pool : detail::move_only {
 public:
  memory_pool() noexcept = default;
  memory_pool(memory_pool&&) noexcept = default;
  /// These two tell the pool its owner is gone (it lives on while raw allocations do), beyond dropping the state.
  memory_pool& operator=(memory_pool&&) noexcept;
  ~memory_pool();

  static result<memory_pool> create(const pool_properties& properties);
  /// The device's default pool (cuDeviceGetDefaultMemPool): not owned, never destroyed by pvmm; its attributes
  /// are the driver's (release threshold 0).
  static result<memory_pool> default_pool(int device);

  /// A pool another process exported (export_posix_fd), for use on `device` (accessible from that device until
  /// set_access grants others). The fd stays the caller's. The imported pool cannot allocate.
  static result<memory_pool> import_posix_fd(const pool_export& from, int device);

  /// The fd and identity another process imports this pool with (exportable pools only).
  result<pool_export> export_posix_fd() const;
  /// The record of a live allocation of this pool (allocate_async's pointer), for a process that imported it.
  /// Export the pool (export_posix_fd) first: before that every backend refuses with errc::invalid_argument (CUDA
  /// refuses pointer exports of a pool it has not exported). Export once the host has seen the allocation complete
  /// (a synchronize of its stream, or of an event after it): the host backend refuses an earlier export with
  /// errc::invalid_argument; the drivers promise nothing for it.
  result<pool_pointer_export> export_pointer(const void* pointer) const;
  /// An allocation exported from the pool this one was imported from, owned here: freeing it (free_async, or the
  /// destructor, on `free_on`) ends this process's use; the exporter frees it after that.
  result<pool_allocation> import_pointer(const pool_pointer_export& from, stream_ref free_on) const;

  /// `size` bytes (> 0) usable in `on`'s order, owned.
  result<pool_allocation> allocate(std::size_t size, stream_ref on) const;
  /// For allocator adaptors: a raw pointer to free with free_async(pointer, stream) on this pool.
  result<void*> allocate_async(std::size_t size, stream_ref on) const;
  /// Frees a pointer allocate_async returned (errc::invalid_argument for any other, one already freed, or one a
  /// pool_allocation owns).
  status free_async(void* pointer, stream_ref on) const;

  result<pool_usage> usage() const;
  /// Sets the high marks to the current values (on every backend).
  status reset_high_marks() const;
  status set_release_threshold(std::uint64_t bytes) const;
  /// The release threshold and reuse policies in force (a default pool's are the driver's: threshold 0).
  result<pool_attributes> attributes() const;
  /// Changes them; work already enqueued keeps the reuse it was given.
  status set_attributes(const pool_attributes& attributes) const;
  /// Gives back unused memory now, keeping at least `keep` bytes reserved. Frees the host has not seen complete
  /// (not synchronized) still count as used.
  status trim_to(std::size_t keep) const;
  /// Grants other devices access to the pool's memory (the pool's own device always has read_write; a pool of host
  /// memory has no own device: every device's grant goes to the driver, as CUDA's host pools are the host's alone
  /// until granted).
  status set_access(access_list grants) const;
  result<access> query_access(location where) const;

  /// Drops the owner's reference: the pool goes when its last allocation does (raw pointers are then freed with
  /// pvmm::free_async).
  status release() noexcept;

  bool valid() const noexcept { return state_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }
  int device() const noexcept;
  bool owned() const noexcept;     ///< false for a default pool
  bool imported() const noexcept;  ///< made by import_posix_fd
  pool_id id() const noexcept;     ///< all zero unless exportable or imported
  pool_handle native_handle() const noexcept;

 private:
  explicit memory_pool(std::shared_ptr<detail::pool_state> state) noexcept;
  std::shared_ptr<detail::pool_state> state_;
};

/// Frees a raw pointer from memory_pool::allocate_async in `on`'s order, finding its pool (as cuMemFreeAsync does):
/// the way to free what is left once the pool's owner is gone. errc::invalid_argument for any other pointer.
status free_async(void* pointer, stream_ref on);

namespace ipc {
/// Sends a pool export (its fd and identity in one message) over a connected AF_UNIX socket with message
/// boundaries, as send_fds does.
status send_pool(int socket, const pool_export& pool,
                 std::chrono::milliseconds timeout = std::chrono::milliseconds(10000));
/// Receives what send_pool sent. errc::protocol_error for any other message (its fds are closed).
result<pool_export> receive_pool(int socket, std::chrono::milliseconds timeout = std::chrono::milliseconds(10000),
                                 const peer_rule* rule = nullptr);
}  // namespace ipc

}  // namespace pvmm
