// pvmm/sleeping_allocator.hpp - tagged allocations whose physical memory can be given back and restored at the same
// addresses (vLLM's sleep mode, SGLang's torch_memory_saver), on every backend.
//
// Each allocation is its own reserved range with its own physical memory. sleep(tags) saves the contents of the
// tagged allocations as each tag's policy says, unmaps them and releases their physical memory, keeping every address
// reserved (and, with release_address_range, freeing and re-reserving the exact range: what ROCm needs to return
// VRAM); wake(tags) maps new physical memory at the same addresses and restores the saved contents.
//
// Policies (set_policy, per tag; default offload_pinned):
// - discard: nothing is saved; after wake the contents are undefined (zero on the host backend);
// - offload_pinned: one page-locked host range per tag and sleep holds the copies (fresh memory, from 2 MiB up on
//   2 MiB pages where the kernel gives them, registered: live_objects counts it among registrations; a page-locked
//   allocation where the backend offers no registration); the device copies into it directly (no staging);
// - offload_pageable: ordinary anonymous host memory the kernel may swap or reclaim, filled through the staging ring;
// - offload_file: an unlinked file in policy.file_directory (nothing stays on disk), written through the ring.
// retain_host_copy keeps the host copy after wake: the next sleep of that allocation copies nothing (the caller
// promises the memory did not change since the wake, as for weights; drop_host_copies undoes it).
//
// Copies: bulk and asynchronous, spread over copy_streams streams; pageable and file copies go through one pinned
// staging ring (staging_slots x staging_slot_bytes), made once and reused for the allocator's life. Sleep unmaps each
// allocation as soon as the host has seen its copy complete while later copies run; wake maps each allocation and
// queues its copy while earlier ones run.
//
// Async forms: sleep(tags, on) orders the copies after the work queued on `on` so far; it returns once the memory is
// given back (an unmap must follow the copies it depends on: invariant 4), with an event recorded on `on`.
// wake(tags, on) maps, queues the copies and makes `on` wait for them on the device; it returns the event marking
// their end without waiting for it on the host (the host copies are freed once the host sees that event done: at
// the next call, or at release).
//
// Wake when memory is short: errc::out_of_memory naming the tag and the bytes asked; what this wake had mapped is
// given back again, every host copy is kept, and a later wake retries. Never a process exit. The same holds for a
// wake failing at any backend call (a map, a grant, a copy, a staging-ring wait, the final synchronize): every
// allocation is asleep again, and with release_address_range its range is not left reserved.
//
// Generations: every allocation carries a generation that changes whenever its physical memory does (sleep, wake,
// free), readable by generation_of. Backing callbacks run before the old backing goes (sleep: before the unmap; free:
// before the release) and at wake before the new backing is mapped, each with the old and new generation; they run
// on the calling thread, never under a lock of pvmm's (a callback may call the allocator; a sleep or wake it starts
// answers errc::busy).
//
// Tags: allocate(size) uses the current tag; tag_scope sets it for a scope and restores the outer one after
// (nested scopes nest). tag_of(p) answers for any address inside an allocation.
//
// Threading: every member may be called from several threads at once. One sleep or wake runs at a time: another
// started meanwhile answers errc::busy, and so does free or release of an allocation it is moving. Moving or
// destroying the allocator may not overlap any other use. The destructor frees everything (allocations included).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <pvmm/detail/unique_owner.hpp>
#include <pvmm/error.hpp>
#include <pvmm/stream.hpp>

namespace pvmm {

/// What sleep does with a tag's contents.
enum class sleep_policy : int { discard = 0, offload_pinned = 1, offload_pageable = 2, offload_file = 3 };

/// A tag's policy.
struct tag_policy {
  sleep_policy policy = sleep_policy::offload_pinned;
  bool retain_host_copy = false;  ///< keep the host copy after wake; the next sleep of unchanged memory copies nothing
  std::string file_directory;     ///< offload_file: where the (unlinked) file goes; empty: $TMPDIR, else /tmp
};

/// What a sleeping allocator is created with.
struct sleeping_options {
  int device = 0;
  unsigned copy_streams = 2;                               ///< streams the copies are spread over (at least 1)
  unsigned staging_slots = 4;                              ///< slots of the pinned staging ring (at least 2)
  std::size_t staging_slot_bytes = std::size_t{32} << 20;  ///< bytes a slot (a multiple of 4 KiB)
  /// Release the reserved range too while asleep and reserve the exact range again at wake (ROCm returns no VRAM
  /// while the range stays reserved). Default: on for the hip backend, off elsewhere. This allocator's own
  /// allocations never land on a sleeping allocation's range; a reservation made elsewhere (another allocator, the
  /// driver) may take it, and the wake then fails with errc::address_unavailable, the copies kept for a retry.
  std::optional<bool> release_address_range;
  /// Keep the page-locked host memory of woken pinned copies for the next sleep instead of freeing it at wake:
  /// page-locking is what a sleep at bus speed cannot hide (about 8 GiB/s on 2 MiB pages), so a job that sleeps
  /// every step trades the host memory for it. Freed by trim_host_memory() and release().
  bool keep_host_memory = false;
};

/// What a sleeping allocator holds (all tags, or one).
struct sleeping_stats {
  std::size_t allocations = 0;
  std::size_t reserved_bytes = 0;   ///< address space of the allocations (asleep or not)
  std::size_t resident_bytes = 0;   ///< physical memory mapped now
  std::size_t offloaded_bytes = 0;  ///< host copies held (asleep, or retained)
  std::size_t asleep = 0;           ///< allocations asleep
  std::size_t staging_bytes = 0;    ///< the staging ring (0 until a pageable or file copy needed it)
  std::size_t kept_host_bytes = 0;  ///< page-locked memory kept for the next sleep (keep_host_memory)
};

/// Why a backing changes.
enum class backing_event : int { sleep = 0, wake = 1, free = 2 };

/// What a backing callback is told.
struct backing_change {
  void* address = nullptr;
  std::size_t size = 0;
  std::uint64_t old_generation = 0;
  std::uint64_t new_generation = 0;  ///< 0 for free
  backing_event reason = backing_event::sleep;
  const char* tag = "";  ///< valid during the call
};
using backing_callback = void (*)(const backing_change& change, void* user_data);

/// A sleeping allocator of one device's memory. Move-only.
class sleeping_allocator : detail::move_only {
 public:
  sleeping_allocator() noexcept;  ///< empty
  sleeping_allocator(sleeping_allocator&&) noexcept;
  sleeping_allocator& operator=(sleeping_allocator&&) noexcept;
  ~sleeping_allocator();

  static result<sleeping_allocator> create(const sleeping_options& options = {});

  /// A new allocation of at least `size` bytes (a multiple of the granularity) tagged `tag` (or the current tag).
  /// errc::invalid_size for 0; errc::out_of_memory when the round-up overflows or memory is short.
  result<void*> allocate(std::size_t size, std::string_view tag);
  result<void*> allocate(std::size_t size);
  /// Frees an allocation (asleep or awake), after the backing callbacks ran.
  status deallocate(void* pointer);

  status set_policy(std::string_view tag, const tag_policy& policy);
  result<tag_policy> policy(std::string_view tag) const;

  /// The tag allocate(size) uses now ("default" at first).
  std::string current_tag() const;
  /// Sets the current tag; returns the one it replaces.
  std::string exchange_tag(std::string tag);
  /// Sets the current tag for a scope and restores the outer one at its end.
  class tag_scope {
   public:
    tag_scope(sleeping_allocator& a, std::string tag) : a_(&a), outer_(a.exchange_tag(std::move(tag))) {}
    ~tag_scope() { (void)a_->exchange_tag(std::move(outer_)); }
    tag_scope(const tag_scope&) = delete;
    tag_scope& operator=(const tag_scope&) = delete;

   private:
    sleeping_allocator* a_;
    std::string outer_;
  };

  /// Sleeps every awake allocation whose tag is in `tags` (all when empty). Blocks until the memory is given back.
  status sleep(const std::vector<std::string>& tags = {});
  result<event> sleep(const std::vector<std::string>& tags, stream_ref on);
  /// Wakes every sleeping allocation whose tag is in `tags` (all when empty). Blocks until the contents are back.
  status wake(const std::vector<std::string>& tags = {});
  result<event> wake(const std::vector<std::string>& tags, stream_ref on);
  /// Page-locks now the host memory the next sleep of `tags` (all when empty) copies into for its pinned-policy tags,
  /// so that sleep runs at the speed of the bus: page-locking fresh memory (about 8 GiB/s) is otherwise what a
  /// sleep to pinned memory costs. Held as keep_host_memory holds it (stats().kept_host_bytes) until a sleep of its
  /// tag takes it (no other tag's does; a sleep that fails puts it back) or trim_host_memory() frees it; what a kept
  /// store already covers is not made again. Sizes are those of the awake allocations now. errc::out_of_memory
  /// naming the tag, nothing made, when host memory is short (checked against MemAvailable first: locked pages
  /// cannot be swapped, and the kernel answers a fault it cannot serve with the OOM killer).
  status prepare_host_memory(const std::vector<std::string>& tags = {});
  /// Frees the page-locked host memory kept for reuse (keep_host_memory, prepare_host_memory).
  status trim_host_memory();
  /// Forgets retained host copies of the tags (all when empty) of awake allocations.
  status drop_host_copies(const std::vector<std::string>& tags = {});

  /// Reads `size` bytes at `offset` of the host copy of the allocation holding `pointer` (asleep, or retained).
  /// errc::invalid_argument when it has none (awake, or discarded) or the range runs past the allocation.
  status read_host_copy(const void* pointer, std::size_t offset, void* out, std::size_t size) const;

  result<std::string> tag_of(const void* pointer) const;    ///< any address inside an allocation
  std::size_t size_of(const void* pointer) const noexcept;  ///< the allocation starting at pointer; 0: none
  result<std::uint64_t> generation_of(const void* pointer) const;
  result<bool> asleep(const void* pointer) const;

  /// Registers a backing callback; returns its id (for remove_backing_callback).
  result<std::uint64_t> add_backing_callback(backing_callback callback, void* user_data);
  status remove_backing_callback(std::uint64_t id);

  sleeping_stats stats() const noexcept;
  sleeping_stats stats(std::string_view tag) const noexcept;

  /// Frees everything now (allocations included). errc::busy while a sleep or wake runs.
  status release() noexcept;
  bool valid() const noexcept { return state_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }
  int device() const noexcept;
  std::size_t granularity() const noexcept;

  struct state;

 private:
  explicit sleeping_allocator(std::unique_ptr<state> s) noexcept;
  std::unique_ptr<state> state_;
};

}  // namespace pvmm
