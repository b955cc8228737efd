// What the stream-ordered allocators (caching_allocator, pinned_pool) repeat, written once: the empty-owner error, the
// check that a stream is one of the allocator's device, high marks, a cache of events recorded at frees, and the
// shell around their state: release(), trim(), the destructor's half and reset_peaks().
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <pvmm/stream.hpp>

#include "core/operation.hpp"
#include "core/pimpl_moves.hpp"

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

// The shell around an allocator's state (State has `lock` and stats `st` with live_blocks); give_back(state, op)
// gives its cached memory back (op null: errors ignored).

/// release(): busy while blocks are allocated; otherwise the cache given back and the state gone.
template <class State, class GiveBack>
status release_state(std::unique_ptr<State>& state, const operation& op, const char* type, GiveBack&& give_back) {
  if (!state) return empty_owner(op, type);
  {
    std::lock_guard<std::mutex> hold(state->lock);
    if (state->st.live_blocks)
      return op.fail(errc::busy, fmt::format("{} blocks are still allocated", state->st.live_blocks),
                     "deallocate them first");
    if (auto ok = give_back(*state, &op); !ok) return ok;
  }
  state.reset();
  return {};
}

/// trim(): the cache given back (errors reported), the blocks still allocated untouched.
template <class State, class GiveBack>
status trim_state(const std::unique_ptr<State>& state, const operation& op, const char* type, GiveBack&& give_back) {
  if (!state) return empty_owner(op, type);
  std::lock_guard<std::mutex> hold(state->lock);
  return give_back(*state, &op);
}

/// The destructor: with no block allocated the state goes (~state gives everything back); otherwise the cache is
/// given back and the state is kept: blocks still allocated keep their memory, never taken from under the caller.
template <class State, class GiveBack>
void drop_state(std::unique_ptr<State>& state, GiveBack&& give_back) noexcept {
  if (!state) return;
  std::lock_guard<std::mutex> hold(state->lock);
  if (state->st.live_blocks == 0) return;
  (void)give_back(*state, nullptr);
  (void)state.release();
}

/// reset_peaks(): the high marks set to the current values.
template <class State>
void reset_peaks_of(const std::unique_ptr<State>& state) noexcept {
  if (!state) return;
  std::lock_guard<std::mutex> hold(state->lock);
  reset_peaks(state->st);
}

}  // namespace pvmm::detail::shell

/// The members the stream-ordered allocators T (caching_allocator, pinned_pool) share, defined once: the moves
/// (core/pimpl_moves.hpp), the destructor, trim(), reset_peaks() and release(), over their state's member
/// `give_back(const operation*)`, which gives the cache back.
#define PVMM_ALLOCATOR_SHELL(T, give_back)                                                                             \
  PVMM_PIMPL_MOVES(T)                                                                                                  \
  T::~T() {                                                                                                            \
    ::pvmm::detail::shell::drop_state(state_,                                                                          \
                                      [](state& st, const detail::operation* op) { return st.give_back(op); });        \
  }                                                                                                                    \
  status T::trim() {                                                                                                   \
    return ::pvmm::detail::shell::trim_state(state_, detail::operation{"pvmm::" #T "::trim"}, #T,                      \
                                             [](state& st, const detail::operation* op) { return st.give_back(op); }); \
  }                                                                                                                    \
  void T::reset_peaks() noexcept { ::pvmm::detail::shell::reset_peaks_of(state_); }                                    \
  status T::release() noexcept {                                                                                       \
    return ::pvmm::detail::shell::release_state(                                                                       \
        state_, detail::operation{"pvmm::" #T "::release"}, #T,                                                        \
        [](state& st, const detail::operation* op) { return st.give_back(op); });                                      \
  }
