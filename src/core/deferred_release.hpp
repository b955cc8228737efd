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

/// Deletes every listed holder on the calling thread, which holds no lock of pvmm's (a teardown may call user
/// code: a bootstrap's destructor, a Python store under the GIL). Reentrant: a teardown may call it again.
void release_deferred() noexcept;

}  // namespace pvmm::detail
