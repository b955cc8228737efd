// The sleeping allocator's state (include/pvmm/sleeping_allocator.hpp): its entries, host copies and copy engine.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <pvmm/allocation.hpp>
#include <pvmm/pinned.hpp>
#include <pvmm/reservation.hpp>
#include <pvmm/sleeping_allocator.hpp>
#include <pvmm/stream.hpp>

#include "core/operation.hpp"
#include "observe/observe.hpp"

namespace pvmm::detail::sleeping {

inline constexpr const char* empty_text = "this sleeping_allocator is empty (released or moved from)";

/// One tag's host copies made by one sleep: a page-locked allocation, anonymous memory or an unlinked file.
struct host_store {
  sleep_policy kind = sleep_policy::offload_pinned;
  unsigned char* locked = nullptr;  // offload_pinned: registered fresh pages (sleep_host_pages.cpp)
  host_registration registration;
  pinned_allocation pinned;     // offload_pinned where host registration is not offered
  std::string prepared_for;     // prepare_host_memory: the tag it was made for (no other tag's sleep takes it)
  bool kept = false;            // it has been in spare_pinned: a failed sleep that took it puts it back
  void* mapped_base = nullptr;  // offload_pinned: the mapping under `locked`
  std::size_t mapped_length = 0;
  void* pageable = nullptr;  // mmap'ed
  int fd = -1;
  std::size_t bytes = 0;

  /// register_host: the pinned policy registers fresh pages (lock_fresh_pages), else makes a page-locked allocation.
  static result<std::shared_ptr<host_store>> create(const tag_policy& policy, std::size_t bytes, bool register_host,
                                                    const operation& op);
  host_store() = default;
  host_store(const host_store&) = delete;
  host_store& operator=(const host_store&) = delete;
  ~host_store();
  /// Host memory to copy to or from directly (pinned and pageable), nullptr for a file.
  unsigned char* memory() const noexcept;
  /// offload_pinned: the page-locked bytes it holds (the copies' size rounded up to its pages).
  std::size_t page_locked_bytes() const noexcept;
  /// offload_pinned: `size` bytes of fresh page-locked memory into `locked`.
  status lock_fresh_pages(std::size_t size, const operation& op);
  void unlock_pages() noexcept;
  status write(std::size_t offset, const void* from, std::size_t size, const operation& op);
  status read(std::size_t offset, void* out, std::size_t size, const operation& op) const;
};

struct entry {
  std::string tag;
  void* address = nullptr;
  std::size_t size = 0;  // mapped bytes (a granularity multiple)
  address_reservation range;
  physical_allocation memory;        // empty while asleep
  std::shared_ptr<host_store> copy;  // the contents while asleep (or retained after wake)
  std::size_t copy_offset = 0;
  std::uint64_t generation = 0;
  bool asleep = false;
  bool moving = false;  // a sleep or wake works on it (free refuses)
};

/// Copy streams, a pool of events and the pinned staging ring, made once and reused.
struct copy_engine {
  int device = 0;
  unsigned stream_count = 2;
  unsigned slots = 4;
  std::size_t slot_bytes = 0;
  std::vector<stream> streams;
  std::vector<event> events;  // pool: events[i] is used by the i-th copy of an operation
  pinned_allocation ring;
  std::atomic<std::size_t> ring_bytes{0};  // the ring's size, for stats() (read without the transition)
  std::vector<event> slot_done;            // the last copy through each slot
  std::vector<bool> slot_used;

  status ensure_streams(const operation& op);
  status ensure_ring(const operation& op);
  result<event*> event_at(std::size_t i, const operation& op);
  /// Every copy stream waits for the work queued on `on` so far.
  status follow(stream_ref on, const operation& op);
  /// `on` waits (on the device) for every copy queued so far; returns an event recorded on `on` after them.
  result<event> join_into(stream_ref on, const operation& op);
  status synchronize_all(const operation& op);
  status wait_slot(unsigned slot, const operation& op);
};

inline bool selected(const entry& e, const std::vector<std::string>& tags) {
  for (const auto& t : tags)
    if (t == e.tag) return true;
  return tags.empty();
}

struct callback_slot {
  std::uint64_t id = 0;
  backing_callback fn = nullptr;
  void* user = nullptr;
};

/// Host copies of an asynchronous wake, freed once the host sees its event done.
struct pending_release {
  event done;
  std::vector<std::shared_ptr<host_store>> stores;
};

}  // namespace pvmm::detail::sleeping

namespace pvmm {

struct sleeping_allocator::state {
  using entry = detail::sleeping::entry;
  sleeping_options options;
  std::size_t granularity = 0;
  bool release_range = false;
  bool register_host = true;  // host memory can be registered here (read at create; else page-locked allocations)
  // Held by allocate's reservations (reserve_apart) and a wake's reservation of an entry's exact range (map_new),
  // before `lock`: a range allocate holds aside for a moment is never what a wake finds taken.
  std::mutex reserve_lock;
  mutable std::mutex lock;  // guards everything below but `engine`; never held while user code runs
  std::map<std::uintptr_t, std::unique_ptr<entry>> entries;
  std::map<std::string, tag_policy, std::less<>> policies;
  std::string current_tag = "default";
  std::vector<detail::sleeping::callback_slot> callbacks;
  std::uint64_t next_callback = 1;
  std::uint64_t next_generation = 1;
  bool transition = false;  // a sleep or wake runs (it alone uses `engine` and the entries it marked moving)
  std::vector<detail::sleeping::pending_release> pending;
  std::vector<std::shared_ptr<detail::sleeping::host_store>> spare_pinned;  // kept or prepared: reused by sleeps
  /// A page-locked store of at least `bytes` for `tag`: a kept one (pick_kept) or a new one.
  result<std::shared_ptr<detail::sleeping::host_store>> pinned_store(const tag_policy& p, const std::string& tag,
                                                                     std::size_t bytes, const detail::operation& op);
  /// A failed sleep's stores that no entry took and that were kept before go back to spare_pinned.
  void keep_unused(std::map<std::string, std::shared_ptr<detail::sleeping::host_store>>& stores);
  /// Makes the pinned stores the next sleep of `tags` would make, and keeps them (prepare_host_memory).
  status prepare_pinned(const std::vector<std::string>& tags, const detail::operation& op);
  /// Stores a wake no longer needs: kept for reuse (keep_host_memory, pinned) or dropped. Lock held.
  void recycle(std::vector<std::shared_ptr<detail::sleeping::host_store>>& stores);
  detail::sleeping::copy_engine engine;
  // Memory snapshots (observe/providers_alloc.cpp): listed from create on (destroyed first), described by the
  // provider.
  detail::observe::listed<state> listed;
  static void describe(detail::observe::collector& c);
  static detail::observe::provider snapshot_provider;

  entry* find_containing(const void* p) const;  // lock held
  /// Whether [at, at + size) overlaps an entry's range (lock held). With release_range a sleeping entry's range is
  /// not reserved, so a new reservation may land on it: allocate holds such ranges aside and reserves again.
  bool overlaps_entry(std::uintptr_t at, std::size_t size) const;
  /// A reservation of `size` bytes overlapping no entry's range (allocate): errc::address_unavailable after more
  /// tries than the entries' ranges could make collide.
  result<address_reservation> reserve_apart(std::size_t size, const detail::operation& op);
  tag_policy policy_of(const std::string& tag) const;  // lock held
  /// Per tag: its policy and the bytes of the store a sleep copies the tag's allocations into.
  using copy_plan = std::map<std::string, std::pair<tag_policy, std::size_t>>;
  /// Adds e to the plan of a sleep (its bytes to its tag's store); false: nothing of it is copied (discarded, or
  /// its retained copy reused). out_of_memory when a tag's copies exceed the address space. Lock held.
  result<bool> plan_copy(copy_plan& plan, const entry& e, const detail::operation& op) const;
  /// Marks the selected entries moving (awake ones for sleep, asleep ones for wake); errc::busy when a transition
  /// runs. Also reaps pending releases seen done.
  result<std::vector<entry*>> begin(const std::vector<std::string>& tags, bool for_sleep, const detail::operation& op);
  void end(const std::vector<entry*>& moved);
  /// Runs the backing callbacks (no lock held) for each entry; assigns the new generations.
  void notify(const std::vector<entry*>& moved, backing_event why);
  status map_new(entry& e, const detail::operation& op);
  status unmap_release(entry& e, const detail::operation& op);
  result<event> do_sleep(const std::vector<entry*>& moved, stream_ref* on, const detail::operation& op);
  result<event> do_wake(const std::vector<entry*>& moved, stream_ref* on, const detail::operation& op);
  /// sleep (for_sleep) or wake, the one body of the four public forms: begin, the copies (ordered on *on, or
  /// synchronous when `on` is null), end.
  result<event> move_tags(const std::vector<std::string>& tags, bool for_sleep, stream_ref* on,
                          const detail::operation& op) {
    auto moved = begin(tags, for_sleep, op);
    if (!moved) return std::move(moved).error();
    auto done = for_sleep ? do_sleep(*moved, on, op) : do_wake(*moved, on, op);
    end(*moved);
    return done;
  }
  void reap_pending();  // lock held
};

}  // namespace pvmm
