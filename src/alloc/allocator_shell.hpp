// What the stream-ordered allocators (caching_allocator, pinned_pool) repeat, written once: the empty-owner error, the
// check that a stream is one of the allocator's device, high marks, and a cache of events recorded at frees.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include <pvmm/stream.hpp>

#include "core/operation.hpp"

namespace pvmm::detail::shell {

/// errc::already_released: "this <type> is empty (released or moved from)".
[[gnu::cold]] error empty_owner(const operation& op, const char* type);

/// A stream pvmm can use (check_stream) of the allocator's device; `whose` names what the device belongs to.
status check_stream_of(stream_ref on, int device, const operation& op, const char* whose);

/// Raises the high marks (peak_reserved, peak_live) to the current values.
template <class Stats>
void note_peaks(Stats& st) noexcept {
  if (st.peak_reserved < st.reserved) st.peak_reserved = st.reserved;
  if (st.peak_live < st.live) st.peak_live = st.live;
}
/// Sets the high marks to the current values (reset_peaks).
template <class Stats>
void reset_peaks(Stats& st) noexcept {
  st.peak_reserved = st.reserved;
  st.peak_live = st.live;
}

/// Events for frees, reused once seen complete: creating one is a driver call the warm path must not make.
class event_cache {
 public:
  /// An event recorded on `on` (a spare one if any, else a new one of `device`); on failure nothing is lost.
  /// `ns`: where the time spent is added (creation and record), or null.
  result<event> record(int device, stream_ref on, const operation& op, std::uint64_t* ns = nullptr);
  void give_back(event e) { spare_.push_back(std::move(e)); }
  void clear() noexcept { spare_.clear(); }

 private:
  std::vector<event> spare_;
};

}  // namespace pvmm::detail::shell
