// pvmm/stream.hpp - streams and events: the order in which stream-ordered work (pool allocations and frees,
// async copies, host functions) runs, on every backend.
//
// Every stream-ordered call names its stream: pvmm has no implicit default stream. A stream_ref borrows a
// stream (one pvmm created, or a native one the program owns); `stream` and `event` own theirs.
//
// Threading: stream_ref, stream and event calls may be made from any thread, also on one stream or event at once
// (the drivers allow it); release, moving and destroying a stream or event may not overlap any other use of it
// (through a stream_ref copy included). A host function runs on a thread of the backend's and must not call pvmm's or
// the driver's stream functions (the drivers forbid it).
#pragma once

#include <cstddef>
#include <cstdint>

#include <pvmm/detail/handle_value.hpp>
#include <pvmm/detail/unique_owner.hpp>
#include <pvmm/error.hpp>

namespace pvmm {

/// The backend's handle of a stream (CUstream, hipStream_t, the host backend's worker) as an integer.
struct stream_handle : detail::handle_value<stream_handle> {};
/// The backend's handle of an event (CUevent, hipEvent_t, the host backend's event) as an integer.
struct event_handle : detail::handle_value<event_handle> {};

class event;

/// A borrowed stream of one device (native_handle() and device(), from handle_ref): pvmm never destroys it. Copyable.
class stream_ref : public detail::handle_ref<stream_handle> {
 public:
  /// An empty reference: every call on it answers errc::invalid_argument.
  constexpr stream_ref() noexcept = default;
  /// Wraps native stream `native` (nonzero: streams are explicit) of device `device`; the caller keeps it alive
  /// while pvmm uses it. On CUDA, `native` is a CUstream; on HIP a hipStream_t; on the host backend a handle
  /// from stream::native_handle() (others are refused with errc::invalid_handle).
  constexpr stream_ref(stream_handle native, int device) noexcept : handle_ref(native, device) {}

  /// Waits until all work enqueued so far has completed. Pool frees it saw complete become reusable on every
  /// stream (memory_pool.hpp, "Portable semantics", rule 1), as event::synchronize makes those it covers.
  status synchronize() const;
  /// True when all work enqueued so far has completed. Unlike synchronize, an answer of true does not make the
  /// stream's pool frees reusable on other streams (the drivers were measured not to count a query).
  result<bool> query() const;
  /// Work enqueued after this call waits for the work `e` recorded (an event never recorded: no wait).
  status wait(const event& e) const;
  /// Runs fn(data) on a backend thread once the work before it has completed; later work waits for it.
  status launch_host_function(void (*fn)(void*), void* data) const;
  /// Copies `size` bytes in stream order between host memory and memory the stream's device can access (or
  /// within either). The source is read in stream order; host memory pvmm did not make (query_pointer answers
  /// memory_kind::none) may be reused as soon as the call returns (as the drivers promise for pageable memory),
  /// while pinned, registered and managed memory is read when the copy runs. The destination holds the data once
  /// the stream's work up to here has completed. Both ranges are checked before anything is enqueued: a range that
  /// wraps or runs past the end of the memory pvmm made there is errc::out_of_range, a reservation's unmapped part
  /// errc::not_mapped; on the host backend (whose worker runs a memcpy) the process's map must also cover memory
  /// pvmm did not make and reservations readable (source) or writable (destination): errc::not_mapped, or
  /// errc::not_permitted for a read-only destination.
  status copy_async(void* destination, const void* source, std::size_t size) const;
};

/// Owns a stream on one device. Move-only; usable wherever a stream_ref is. The destructor (and release()) waits
/// for the work enqueued on it to complete, then destroys it: nothing on it runs after it is gone, on every
/// backend.
class stream : public detail::unique_owner<stream, detail::handle_holder<stream_ref>> {
 public:
  stream() noexcept = default;

  static result<stream> create(int device);
  /// Waits for the stream's work, then destroys it; the owner is empty afterwards even when the driver reports
  /// an error (the stream cannot be used again). Fails with errc::already_released when empty.
  status release() noexcept;

 private:
  friend unique_owner;
  stream(stream_handle h, int device) noexcept : unique_owner(std::in_place, h, device) {}
  static void teardown(const stream_ref& s) noexcept;
};

/// Owns an event of one device: a point in a stream's work that others can wait for. Move-only.
class event : public detail::unique_owner<event, detail::handle_holder<detail::handle_ref<event_handle>>> {
 public:
  event() noexcept = default;

  static result<event> create(int device);
  /// Captures the work enqueued on `on` so far (a stream of the event's device).
  status record(stream_ref on);
  /// Waits until the recorded work has completed (at once when never recorded).
  status synchronize() const;
  /// True when the recorded work has completed (or nothing was recorded).
  result<bool> query() const;
  /// Destroys it now; the owner is empty afterwards even when the driver reports an error. Fails with
  /// errc::already_released when empty.
  status release() noexcept;

 private:
  friend unique_owner;
  event(event_handle h, int device) noexcept : unique_owner(std::in_place, h, device) {}
  static void teardown(const detail::handle_ref<event_handle>& e) noexcept;
};

}  // namespace pvmm
