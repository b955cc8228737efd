// Streams and events: validation and ownership in one place; the backend only translates.
#include <pvmm/stream.hpp>

#include <fmt/format.h>

#include "backend/device.hpp"
#include "backend/stream.hpp"
#include "core/device.hpp"
#include "core/operation.hpp"
#include "core/ownership.hpp"
#include "core/range_registry.hpp"
#include "stream/copy_range.hpp"
#include "stream/stream_checks.hpp"

namespace pvmm {
namespace detail {
error empty_stream(const operation& op) {
  return op.fail(errc::invalid_argument, "the stream is empty (0)",
                 "streams are explicit: create one with pvmm::stream::create, or wrap a native stream");
}

namespace {

status check_event(const event& e, const operation& op) {
  if (!e.valid()) return op.fail(errc::already_released, "this event is empty (released or moved from)");
  return {};
}

/// The handle backend call `step` makes on `device` once the device is checked: stream::create's and
/// event::create's one body (`name`: the operation).
template <class Handle, class Create>
result<Handle> create_on_device(const char* name, const char* step, int device, Create create) {
  auto args = [&] { return fmt::format("device={}", device); };
  const operation op{name, args};
  PVMM_TRY(check_location(location::device(device), op));
  return op.step(step, [&] { return create(device); });
}

}  // namespace
}  // namespace detail

status stream_ref::synchronize() const {
  auto args = [&] { return fmt::format("stream={:#x}, device={}", handle_.value, device_); };
  const detail::operation op{"pvmm::stream_ref::synchronize", args};
  PVMM_TRY(detail::check_stream(*this, op));
  return op.step("synchronize_stream", [&] { return detail::backend::synchronize_stream(handle_, device_); });
}

result<bool> stream_ref::query() const {
  auto args = [&] { return fmt::format("stream={:#x}, device={}", handle_.value, device_); };
  const detail::operation op{"pvmm::stream_ref::query", args};
  PVMM_TRY(detail::check_stream(*this, op));
  return op.step("query_stream", [&] { return detail::backend::query_stream(handle_, device_); });
}

status stream_ref::wait(const event& e) const {
  auto args = [&] {
    return fmt::format("stream={:#x}, device={}, event={:#x}", handle_.value, device_, e.native_handle().value);
  };
  const detail::operation op{"pvmm::stream_ref::wait", args};
  PVMM_TRY(detail::check_stream(*this, op));
  PVMM_TRY(detail::check_event(e, op));
  return op.step("wait_event", [&] { return detail::backend::wait_event(handle_, device_, e.native_handle()); });
}

status stream_ref::launch_host_function(void (*fn)(void*), void* data) const {
  auto args = [&] { return fmt::format("stream={:#x}, device={}", handle_.value, device_); };
  const detail::operation op{"pvmm::stream_ref::launch_host_function", args};
  PVMM_TRY(detail::check_stream(*this, op));
  if (!fn) return op.fail(errc::invalid_argument, "the host function is null");
  return op.step("launch_host_function",
                 [&] { return detail::backend::launch_host_function(handle_, device_, fn, data); });
}

status stream_ref::copy_async(void* destination, const void* source, std::size_t size) const {
  auto args = [&] {
    return fmt::format("stream={:#x}, device={}, destination={}, source={}, size={:#x}", handle_.value, device_,
                       destination, source, size);
  };
  const detail::operation op{"pvmm::stream_ref::copy_async", args};
  PVMM_TRY(detail::check_stream(*this, op));
  if (size == 0) return {};
  // Both ends against what pvmm knows, before anything is enqueued (a worker or a driver faulting on a bad range
  // would end the process).
  PVMM_TRY(detail::check_copy_range(destination, size, detail::copy_end::destination, device_, op));
  PVMM_TRY(detail::check_copy_range(source, size, detail::copy_end::source, device_, op));
  // The one place that tells pageable memory apart: memory the range registry does not know is pageable. Only a
  // backend that stages pageable sources asks (the drivers tell pageable memory apart themselves).
  using detail::backend::source_read;
  const source_read read = detail::backend::traits.copy_stages_pageable && !detail::range_registry::find(source)
                               ? source_read::stage
                               : source_read::in_stream_order;
  return op.step("copy_async",
                 [&] { return detail::backend::copy_async(destination, source, size, handle_, device_, read); });
}

result<stream> stream::create(int device) {
  PVMM_TRY_ASSIGN(h, detail::create_on_device<stream_handle>("pvmm::stream::create", "create_stream", device,
                                                             detail::backend::create_stream));
  ++detail::live_streams;
  return stream(h, device);
}

namespace {

/// Waits for the stream's work, then destroys it; the stream is gone whatever either step reports. Teardown:
/// never fault-injected, so the work enqueued completes before the stream goes, on every backend.
status destroy(const stream_ref& s) noexcept {
  auto synced = detail::backend::synchronize_stream(s.native_handle(), s.device());
  auto destroyed = detail::backend::destroy_stream(s.native_handle());
  --detail::live_streams;
  return synced ? destroyed : synced;
}

status destroy(const detail::handle_ref<event_handle>& e) noexcept {
  auto destroyed = detail::backend::destroy_event(e.native_handle());  // teardown: never fault-injected
  --detail::live_events;
  return destroyed;
}

}  // namespace

void stream::teardown(const stream_ref& s) noexcept { (void)destroy(s); }

status stream::release() noexcept {
  const detail::operation op{"pvmm::stream::release"};
  if (!valid()) return op.fail(errc::already_released, "this stream is empty (released or moved from)");
  const stream_ref s = *this;
  forget();
  auto done = destroy(s);
  if (!done) return op.wrap(std::move(done).error());
  return {};
}

void event::teardown(const detail::handle_ref<event_handle>& e) noexcept { (void)destroy(e); }

result<event> event::create(int device) {
  PVMM_TRY_ASSIGN(h, detail::create_on_device<event_handle>("pvmm::event::create", "create_event", device,
                                                            detail::backend::create_event));
  ++detail::live_events;
  return event(h, device);
}

status event::record(stream_ref on) {
  auto args = [&] { return fmt::format("event={:#x}, stream={:#x}", handle_.value, on.native_handle().value); };
  const detail::operation op{"pvmm::event::record", args};
  PVMM_TRY(detail::check_event(*this, op));
  PVMM_TRY(detail::check_stream(on, op));
  if (on.device() != device_)
    return op.fail(errc::invalid_device,
                   fmt::format("the event belongs to device {}, the stream to device {}", device_, on.device()));
  return op.step("record_event",
                 [&] { return detail::backend::record_event(handle_, on.native_handle(), on.device()); });
}

status event::synchronize() const {
  auto args = [&] { return fmt::format("event={:#x}", handle_.value); };
  const detail::operation op{"pvmm::event::synchronize", args};
  PVMM_TRY(detail::check_event(*this, op));
  return op.step("synchronize_event", [&] { return detail::backend::synchronize_event(handle_); });
}

result<bool> event::query() const {
  auto args = [&] { return fmt::format("event={:#x}", handle_.value); };
  const detail::operation op{"pvmm::event::query", args};
  PVMM_TRY(detail::check_event(*this, op));
  return op.step("query_event", [&] { return detail::backend::query_event(handle_); });
}

status event::release() noexcept {
  const detail::operation op{"pvmm::event::release"};
  if (!valid()) return op.fail(errc::already_released, "this event is empty (released or moved from)");
  const detail::handle_ref<event_handle> e = *this;
  forget();
  auto done = destroy(e);
  if (!done) return op.wrap(std::move(done).error());
  return {};
}

}  // namespace pvmm
