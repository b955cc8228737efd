// The state behind a memory_pool owner and its allocations: the backend handle, the allocations the pool has
// handed out (in the range registry, owned by this state: a foreign pointer or a second free is refused before the
// driver), and the pool's lifetime.
//
// Lifetime (invariant 17): a pool lives while its owner, a pool_allocation, or a raw allocation (allocate_async)
// does. pool_allocations hold the state by shared_ptr. Raw pointers cannot, so when the owner goes while raw
// allocations are live the state keeps itself (`orphaned`) until the last of them is freed through
// pvmm::free_async, which finds a pointer's pool in the process's pool directory - as cuMemFreeAsync frees
// without naming the pool, and cuMemPoolDestroy defers until the last allocation is freed.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

#include <pvmm/memory_pool.hpp>

#include "core/operation.hpp"
#include "core/range_registry.hpp"
#include "core/spin_lock.hpp"

namespace pvmm::detail {

struct pool_state : std::enable_shared_from_this<pool_state> {
  enum class origin { created, default_pool, imported };
  pool_state(pool_handle h, int d, origin o, pool_id i = {});
  pool_state(const pool_state&) = delete;
  pool_state& operator=(const pool_state&) = delete;
  ~pool_state();

  /// Who owns an allocation: a pool_allocation (which holds this state) or the caller, by raw pointer.
  enum class holder : std::uint8_t { owner, raw };

  enum class recorded { added, present, no_memory };
  /// Records an allocation handed out (or imported), unless it is recorded already.
  recorded add_live(void* p, std::size_t size, holder by);
  /// Records an allocation the backend has just handed out: not live before, so not looked up first (the
  /// lookup probed every size level of the registry on each allocation).
  recorded add_new(void* p, std::size_t size, holder by);
  /// Forgets a live allocation held `by` and returns its size; nothing when `p` is not live. A live pointer held
  /// otherwise is reported in `other` and stays live. `size`: its size where the caller knows it (0 otherwise).
  /// `orphan_counted`: a raw allocation of an orphaned pool, counted off (take_orphan_if_done after its free).
  std::optional<std::size_t> take_live(const void* p, holder by, bool& other, bool& orphan_counted,
                                       std::size_t size = 0);
  std::optional<std::size_t> live_size(const void* p) const;

  /// The owner is gone: keeps this state alive while raw allocations are live.
  static void owner_gone(std::shared_ptr<pool_state> state) noexcept;
  /// After a raw free that take_live counted off an orphaned pool: the self-reference it held once none is left
  /// (drop it outside any lock).
  std::shared_ptr<pool_state> take_orphan_if_done() noexcept;
  /// The stream an owner's destructor frees on: the pool's own, created on first use and destroyed (after a
  /// synchronize) with the pool state, which every pool_allocation keeps alive. An empty stream_ref when it could
  /// not be created.
  stream_ref teardown_stream() noexcept;
  int stream_device() const noexcept;  // the device of teardown_stream (device 0 for a host-located pool)

  const pool_handle handle;
  const int device;
  const bool owned;
  const bool imported;
  const pool_id id;                   // nonzero: exportable (or imported)
  std::atomic<bool> exported{false};  // export_posix_fd has succeeded once: pointers may be exported from then on
  bool host_located = false;          // a pool of host memory: no device has access until granted (set at creation)

 private:
  range_registry::range entry_of(void* p, std::size_t size, holder by) const noexcept;

  /// Guards orphaned, orphan_raw_left, and add_live's look-up-then-add. Neither it nor any counter is touched by an
  /// allocation or a free while the owner lives: the raw allocations are counted once, when the owner goes
  /// (range_registry::count_and_mark sets orphan_set), and from then on by the adds and removes that see the flag.
  mutable spin_lock lock;
  std::atomic<bool> raw_ever{false};    // a raw allocation was made: the owner's going must count them
  std::atomic<bool> orphan_set{false};  // orphaned: read under a registry shard lock by each raw add and remove
  std::size_t orphan_raw_left = 0;      // raw allocations live since orphaned (under lock)
  /// The size of the latest allocation recorded: a free that does not know its pointer's size (a raw free) asks the
  /// range registry at that size's level first, one probe in the common pattern (frees of the sizes allocated)
  /// instead of one per size level in use below the pointer's own. Only a hint: any other level is probed after.
  std::atomic<std::size_t> recent_size{0};
  std::shared_ptr<pool_state> orphaned;  // set while the owner is gone and raw allocations remain
  std::mutex stream_lock;                // guards own_stream (held across its creation only: no user code runs)
  stream_handle own_stream{};            // teardown_stream(), zero until first used
};

// Inline: every pool allocate and free runs them (a call frame each, on the pool pair).
inline range_registry::range pool_state::entry_of(void* p, std::size_t size, holder by) const noexcept {
  range_registry::range entry;
  entry.base = p, entry.size = size, entry.kind = memory_kind::pool, entry.device = device, entry.owner = this;
  entry.holder = static_cast<std::uint8_t>(by);
  return entry;
}

inline pool_state::recorded pool_state::add_new(void* p, std::size_t size, holder by) {
  // Relaxed: the owner is alive (allocating is one of its calls), and its going happens after this call.
  if (by == holder::raw && !raw_ever.load(std::memory_order_relaxed)) raw_ever.store(true, std::memory_order_relaxed);
  if (recent_size.load(std::memory_order_relaxed) != size) recent_size.store(size, std::memory_order_relaxed);
  return range_registry::add(entry_of(p, size, by)) ? recorded::added : recorded::no_memory;
}

inline std::optional<std::size_t> pool_state::take_live(const void* p, holder by, bool& other, bool& orphan_counted,
                                                        std::size_t size) {
  range_registry::range taken;
  if (size == 0) size = recent_size.load(std::memory_order_relaxed);  // a hint of the level to probe first
  orphan_counted = false;
  const auto holder_byte = static_cast<std::uint8_t>(by);
  const auto done =
      by == holder::raw  // only raw allocations are counted for an orphaned pool
          ? range_registry::remove(p, memory_kind::pool, this, holder_byte, &taken, size, orphan_set, orphan_counted)
          : range_registry::remove(p, memory_kind::pool, this, holder_byte, &taken, size);
  other = done == range_registry::removal::held_otherwise;
  if (done != range_registry::removal::removed) return std::nullopt;
  if (orphan_counted) {  // removed after the orphaning count: one fewer left
    std::lock_guard<spin_lock> guard(lock);
    --orphan_raw_left;
  }
  return taken.size;
}

/// errc::already_released for an operation on an empty memory_pool owner.
[[gnu::cold]] error empty_pool(const operation& op);
/// Sets the mutable attributes (threshold, reuse policies) of a pool, as at creation or set_attributes.
status set_attributes(pool_handle h, std::uint64_t release_threshold, bool follow, bool opportunistic, bool internal,
                      const operation& op);

/// The live pool states of this process, to find the pool of a raw pointer (pvmm::free_async). Process-wide
/// because raw pointers are: the caller may have given up every owner of the pool.
std::shared_ptr<pool_state> pool_holding_raw(const void* p);

}  // namespace pvmm::detail
