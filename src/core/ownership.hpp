// The ownership graph behind the public owners (docs/design.md, "Ownership graph"). Each edge is a shared_ptr,
// so teardown order follows from the types:
//   physical_allocation / multicast_object ──▶ allocation_state ◀── mapping_record ◀── reservation_state
// An allocation_state releases its backend handle exactly once, when its last owner or mapping goes
// (invariants 2, 3). A reservation_state unmaps its remaining mappings, then frees (address, size) exactly
// as reserved (invariant 5).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include <pvmm/allocation.hpp>
#include <pvmm/error.hpp>
#include <pvmm/multicast.hpp>
#include <pvmm/reservation.hpp>
#include <pvmm/types.hpp>

#include "core/flat_map.hpp"
#include "core/spin_lock.hpp"

namespace pvmm::detail {

// Live-object counters (pvmm/diagnostics.hpp). Process-wide because leaks are process-wide; atomics
// because owners are created and destroyed on any thread. Reservations, mappings and pool allocations have no
// counter of their own: an atomic increment and decrement on every reserve, map and pool allocation cost more than
// the rest of their bookkeeping (pvmm-own-cost), so query_live_objects counts their records instead (range registry
// entries, a reservation's mappings). Hidden, as every library-internal variable a hot path reads: the other files
// of the library reach them PC-relative instead of through a GOT entry, one cache line and page fewer for a cold
// call (pvmm-own-cost --lines, tools/own-cost-lines.py); nothing outside the library names them.
[[gnu::visibility("hidden")]] extern std::atomic<std::size_t> live_allocations;
[[gnu::visibility("hidden")]] extern std::atomic<std::size_t> live_streams;
[[gnu::visibility("hidden")]] extern std::atomic<std::size_t> live_events;
[[gnu::visibility("hidden")]] extern std::atomic<std::size_t> live_pools;
/// Pool allocations whose owner's teardown could not free them (their record is gone): still counted live.
[[gnu::visibility("hidden")]] extern std::atomic<std::size_t> unfreed_pool_allocations;
[[gnu::visibility("hidden")]] extern std::atomic<std::size_t> live_managed;
[[gnu::visibility("hidden")]] extern std::atomic<std::size_t> live_pinned;
[[gnu::visibility("hidden")]] extern std::atomic<std::size_t> live_registrations;

/// Physical memory or a multicast object: what a mapping maps.
struct allocation_state {
  enum class kind : std::uint8_t { memory, multicast };
  allocation_state(allocation_handle h, std::size_t sz, std::size_t gran, allocation_properties props)
      : raw(h.value), size(sz), granularity(gran), properties(props), what(kind::memory) {
    ++live_allocations;
  }
  allocation_state(multicast_handle h, std::size_t sz, std::size_t gran, allocation_properties props)
      : raw(h.value), size(sz), granularity(gran), properties(props), what(kind::multicast) {
    ++live_allocations;
  }
  allocation_state(const allocation_state&) = delete;
  allocation_state& operator=(const allocation_state&) = delete;
  ~allocation_state();

  allocation_handle memory_handle() const noexcept { return {raw}; }  // what == memory
  multicast_handle multicast() const noexcept { return {raw}; }       // what == multicast
  /// Releases the backend handle once; later calls are no-ops. Teardown: never fault-injected.
  status release_handle();
  /// The backend map call for this kind (the caller makes it a fault-injectable step).
  status map_at(void* address, std::size_t mapped_size, std::size_t offset) const;

  std::uint64_t raw;  // the typed handle's value; memory_handle() / multicast() give it its type back
  std::size_t size;
  std::size_t granularity;           // minimum granularity offsets/sizes must respect
  allocation_properties properties;  // as requested at creation, or read back at import
  kind what;
  bool released = false;
  bool imported = false;  // from another process (a memory snapshot says so)
};

struct mapping_record {
  std::size_t size = 0;
  std::shared_ptr<allocation_state> memory;
  std::size_t memory_offset = 0;
  /// A thread is mapping, unmapping or granting this mapping outside the lock: other threads get errc::busy
  /// instead of acting on a mapping that is changing under them (invariant 15).
  bool busy = false;
  /// The backend mapped it (a record claimed by map() before its backend call is not yet a live mapping), unless
  /// `claim_slot` says so (reservation_state::made).
  bool made = false;
  /// Claimed by a map or set_access through slot `claim_slot - 1` of its reservation while that slot is active
  /// (0: not). A mark left by a claim that has ended is cleared when its slot is taken again.
  std::uint8_t claim_slot = 0;
};

/// Claims given back without the reservation's lock: map and set_access change nothing in the table after a
/// successful driver call but the claim itself, so the claim ends with one release store instead of a second lock
/// round trip. A claim takes a free slot under the lock and marks its mappings with it; clearing `active` gives it
/// back. The slot remembers the range it claimed, whose marks are cleared when it is taken next (before it marks
/// others); a failed map erases its record under the lock before giving its slot back.
struct claim_slots {
  static constexpr std::size_t slots = 4;  // claims in flight at once on one reservation, then busy marks
  std::atomic<bool> active[slots]{};       // set under the lock, cleared (release) outside it
  struct claimed_range {
    std::size_t offset = 0, end = 0;  // [offset, end) in the reservation
    std::size_t index = 0;            // where its first mapping was in the table (a hint)
  };
  claimed_range last[slots];  // each slot's latest claim (under the lock)
};

struct reservation_state {
  reservation_state() = default;
  reservation_state(const reservation_state&) = delete;
  reservation_state& operator=(const reservation_state&) = delete;
  status unmap_all();
  /// Leaves the address registry and frees (address, size) exactly once.
  status free_range();

  // Set when the state is handed out (new_reservation_state) and constant until it is recycled.
  void* address = nullptr;
  std::size_t size = 0;
  bool freed = false;
  /// Guards `mappings` (their busy and claim marks) and the taking of claim slots; never held across a backend
  /// call. Taken after the address registry's lock, never before it.
  mutable spin_lock lock;
  flat_map<std::size_t, mapping_record> mappings;  // keyed by offset in the reservation
  claim_slots claims;                              // map's and set_access's claims (mapping_record::claim_slot)

  /// Whether the backend mapped `m`: marked so, or claimed by a slot no longer active (a map that succeeded; a
  /// failed one erased its record first). Caller holds the lock; acquire: the map's driver call happened before.
  bool made(const mapping_record& m) const noexcept {
    return m.made || (m.claim_slot != 0 && !claims.active[m.claim_slot - 1].load(std::memory_order_acquire));
  }
};

/// A state for a new reservation of (address, size), counted live; null when memory ran out. Reuses a state
/// this thread recycled (reservation_recycler), so reserving and mapping allocate nothing in the steady state.
std::unique_ptr<reservation_state, reservation_recycler> new_reservation_state(void* address,
                                                                               std::size_t size) noexcept;

/// The neutral layer's view of the public owners' state (the headers keep it private).
struct owner_access {
  static const std::shared_ptr<allocation_state>& of(const physical_allocation& a) noexcept { return a.state_; }
  static const std::shared_ptr<allocation_state>& of(const multicast_object& m) noexcept { return m.state_; }
  static physical_allocation allocation(std::shared_ptr<allocation_state> s) noexcept {
    return physical_allocation(std::move(s));
  }
  static multicast_object multicast(std::shared_ptr<allocation_state> s) noexcept {
    return multicast_object(std::move(s));
  }
};

}  // namespace pvmm::detail
