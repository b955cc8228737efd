// What a stream's host function saw finish is let go of on a caller's thread, never inside the host function: CUDA
// and HIP forbid API calls there, and letting go of the last reference to a window tears it down (unmaps, frees,
// drops the caller's bootstrap: user code). A host function only lists what it held; the next pvmm call that may
// tear down (an enqueue of signal work, a team's or window's release, query_live_objects, take_memory_snapshot)
// deletes the list.
#pragma once

#include <memory>

namespace pvmm::detail {

/// From a host function: lists `held` (a heap-allocated holder, deleted by release_deferred). Takes one lock and
/// allocates at most a list entry; with no memory for that, `held` stays allocated (kept, never torn down there).
void defer_release(std::shared_ptr<const void>* held) noexcept;

/// Something that learns by looking (not from a host function) that stream work holding a reference has finished:
/// the driver path's waits (src/team/stream_waits.hpp). release_deferred asks every registered source to collect
/// first (with the sources' lock held: collect takes only its own lock and defer_release's).
struct deferred_source {
  virtual void collect() noexcept = 0;

 protected:
  deferred_source() = default;
  ~deferred_source() = default;
};
/// Registers or removes a source (remove: not while holding a lock collect takes).
void add_deferred_source(deferred_source* source) noexcept;
void remove_deferred_source(deferred_source* source) noexcept;

/// Deletes every listed holder on the calling thread, which holds no lock of pvmm's (a teardown may call user
/// code: a bootstrap's destructor, a Python store under the GIL). Reentrant: a teardown may call it again.
void release_deferred() noexcept;

}  // namespace pvmm::detail
