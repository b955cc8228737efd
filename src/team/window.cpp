// symmetric_window: the flat reservation, create and grow as collective chunk steps, and the accessors.
#include <algorithm>
#include <optional>

#include <pvmm/device.hpp>
#include <pvmm/team.hpp>

#include <fmt/format.h>

#include "team/bootstrap_common.hpp"
#include "team/no_throw.hpp"
#include "team/team_exchange.hpp"
#include "team/window_state.hpp"

namespace pvmm {
namespace {

std::size_t round_up(std::size_t value, std::size_t unit) { return (value + unit - 1) / unit * unit; }

// This rank's memory for a new chunk of its slot. Where fabric handles are refused (CUDA answers NOT_PERMITTED
// without an IMEX channel, even on one node, at cuMemCreate), the window falls back to POSIX fds alone, as NCCL
// does, and remembers why: peers on other nodes are then reported unreachable with that reason.
result<physical_allocation> allocate_chunk(detail::window_state& w, std::size_t size) {
  allocation_properties p;
  p.location = location::device(w.team->options.device);
  p.exportable = w.handles;
  auto made = physical_allocation::create(size, p);
  const bool fabric = (w.handles & handle_types::fabric) != handle_types::none;
  if (made || !fabric || (made.code() != errc::not_permitted && made.code() != errc::not_supported)) return made;
  w.fabric_refused = made.error().message();
  w.handles = static_cast<handle_types>(static_cast<std::uint32_t>(w.handles) &
                                        ~static_cast<std::uint32_t>(handle_types::fabric));
  p.exportable = w.handles;
  return physical_allocation::create(size, p);
}

// The step every rank runs even when its own allocation failed: the failure travels in the step's record, so
// every rank fails alike and at once.
status grow_slot(detail::window_state& w, std::size_t new_size, deadline until, const detail::operation& op) {
  const std::size_t old_size = w.slots[w.rank()].size;
  const std::size_t chunk = new_size - old_size;
  physical_allocation mine;
  if (chunk > 0) {
    auto made = allocate_chunk(w, chunk);
    if (!made) {
      const auto e = op.wrap(std::move(made).error());
      return detail::exchange_chunks(w, physical_allocation(), old_size, 0, &e, until, op);
    }
    mine = std::move(*made);
  }
  return detail::exchange_chunks(w, std::move(mine), old_size, chunk, nullptr, until, op);
}

}  // namespace

namespace detail {
result<std::size_t> stride_of(const std::vector<window_request>& all, std::size_t unit, const operation& op) {
  std::uint64_t largest = 0;
  int explicit_rank = -1;  // the lowest rank that passed a max_size: every other that passed one must match it
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    largest = std::max(largest, all[r].size);
    if (all[r].max_size == 0) continue;
    if (explicit_rank < 0) explicit_rank = r;
    if (all[r].max_size != all[explicit_rank].max_size)
      return op.fail(errc::team_mismatch,
                     fmt::format("rank {} asked for max_size {:#x}, rank {} for {:#x}", r, all[r].max_size,
                                 explicit_rank, all[explicit_rank].max_size),
                     "pass the same max_size on every rank, or 0 (the largest size any rank asks for)");
  }
  const std::uint64_t max = explicit_rank >= 0 ? all[explicit_rank].max_size : largest;
  for (int r = 0; r < static_cast<int>(all.size()); ++r)
    if (all[r].size == 0 || all[r].size > max)
      return op.fail(errc::team_mismatch,
                     fmt::format("rank {} asked for size {:#x} with max_size {:#x}", r, all[r].size, max));
  if (max > (std::uint64_t{1} << 46) / all.size())
    return op.fail(errc::out_of_memory,
                   fmt::format("{} slots of {:#x} bytes exceed the address space pvmm reserves", all.size(), max));
  return round_up(static_cast<std::size_t>(max), unit);
}

result<std::size_t> agree_max_size(window_state& w, const window_options& options, deadline until, const operation& op,
                                   bool* exchanged) {
  std::optional<error> refused;  // still taking part, so every rank fails at once naming this one
  if (auto bad = check_timeout(options.timeout, "options.timeout", op); !bad)
    refused = op.fail(errc::invalid_argument, fmt::format("rank {}: {}", w.rank(), bad.error().detail));
  else if (options.size == 0)
    refused = op.fail(errc::invalid_size, fmt::format("rank {}: a window slot holds at least one byte", w.rank()));
  else if (options.signal_channels < 0 || options.signal_channels > max_signal_channels)
    refused = op.fail(errc::invalid_argument, fmt::format("rank {}: signal_channels {} is outside 0..{}", w.rank(),
                                                          options.signal_channels, max_signal_channels));
  else if (options.max_size != 0 && options.max_size < options.size)
    refused = op.fail(errc::invalid_argument, fmt::format("rank {}: max_size {:#x} is below size {:#x}", w.rank(),
                                                          options.max_size, options.size));
  else
    refused =
        signal_path_refusal(w.rank(), w.team->options.device, options.signal_channels, options.stream_signals, op);
  PVMM_TRY(check_aborted(*w.team, op));
  const window_request mine{options.size, options.max_size,
                            static_cast<std::uint64_t>(std::max(options.signal_channels, 0)),
                            static_cast<std::uint64_t>(options.stream_signals)};
  PVMM_TRY_ASSIGN(all, all_gather(*w.team->ranks, w.team->next_step++, mine, refused, "allgather window sizes", until,
                                  op, exchanged));
  for (int r = 1; r < static_cast<int>(all.size()); ++r)
    if (all[r].signal_channels != all[0].signal_channels)
      return op.fail(errc::team_mismatch, fmt::format("rank {} asked for {} signal channel(s), rank 0 for {}", r,
                                                      all[r].signal_channels, all[0].signal_channels));
  PVMM_TRY(check_same_path(all, op));
  return stride_of(all, w.team->slot_unit, op);
}

}  // namespace detail

symmetric_window::symmetric_window(std::shared_ptr<detail::window_state> state) noexcept : state_(std::move(state)) {}

result<symmetric_window> symmetric_window::create(const team& members, const window_options& options) {
  return detail::no_throw<result<symmetric_window>>(
      "pvmm::symmetric_window::create", [&]() -> result<symmetric_window> {
        auto args = [&] {
          return fmt::format("rank={}, size={:#x}, max_size={:#x}, timeout={}ms", members.rank(), options.size,
                             options.max_size, options.timeout.count());
        };
        const detail::operation op{"pvmm::symmetric_window::create", args};
        if (!members.valid()) return op.fail(errc::invalid_argument, "the team is empty (released or moved from)");
        // A refused timeout still takes part under the default bound (agree_max_size names it): every rank fails
        // with invalid_argument naming this one, whatever the order the ranks arrive in.
        const deadline until =
            deadline_in(options.timeout.count() < 0 ? std::chrono::milliseconds(30000) : options.timeout);
        auto w = std::make_shared<detail::window_state>();
        w->team = members.state_;
        w->handles = w->team->handles;
        w->slots = std::vector<detail::window_slot>(members.size());  // built in place: a slot's flag is atomic
        w->team->adopt(w);
        bool exchanged = false;
        auto agreed = detail::agree_max_size(*w, options, until, op, &exchanged);
        if (!agreed) {
          if (!exchanged) return std::move(agreed).error();  // the bootstrap failed: it tells the peers
          // Possibly this rank's alone (sizes its bootstrap handed it wrong): announced in the step every other
          // rank takes next, so they fail at once naming it.
          const error e = std::move(agreed).error();
          (void)detail::exchange_chunks(*w, physical_allocation(), 0, 0, &e, until, op);
          return e;
        }
        const std::size_t max_size = *agreed;
        w->max_size = max_size;
        w->stride = max_size;
        PVMM_TRY(detail::reserve_range(*w, until, op));
        PVMM_TRY(grow_slot(*w, round_up(options.size, w->team->slot_unit), until, op));
        if (options.signal_channels > 0)
          PVMM_TRY(detail::attach_signals(members, *w, options.signal_channels, options.stream_signals, until, op));
        return symmetric_window(std::move(w));
      });
}

status symmetric_window::grow(std::size_t new_size, std::chrono::milliseconds timeout) {
  return detail::no_throw<status>("pvmm::symmetric_window::grow", [&]() -> status {
    auto args = [&] { return fmt::format("rank={}, new_size={:#x}, timeout={}ms", rank(), new_size, timeout.count()); };
    const detail::operation op{"pvmm::symmetric_window::grow", args};
    if (!state_) return op.fail(errc::already_released, "this window is empty (released or moved from)");
    // A refused timeout still takes part under the default bound, so every rank fails with invalid_argument
    // naming this one, whatever the order the ranks arrive in.
    const deadline until = deadline_in(timeout.count() < 0 ? std::chrono::milliseconds(30000) : timeout);
    const std::size_t rounded = round_up(new_size, state_->team->slot_unit);
    const std::size_t now = state_->slots[state_->rank()].size;
    std::optional<error> refused;
    if (auto bad = detail::check_timeout(timeout, "timeout", op); !bad)
      refused = op.fail(errc::invalid_argument, fmt::format("rank {}: {}", rank(), bad.error().detail));
    else if (new_size < now || rounded > state_->max_size)
      refused = op.fail(errc::out_of_range, fmt::format("a slot grows from {:#x} up to max_size {:#x}; {:#x} asked",
                                                        now, state_->max_size, new_size));
    // A refused argument still takes part in the step, so every rank fails at once naming this one.
    if (refused) return detail::exchange_chunks(*state_, physical_allocation(), now, 0, &*refused, until, op);
    PVMM_TRY(grow_slot(*state_, rounded, until, op));
    if (state_->signals) return detail::refresh_pointer_table(*state_, until, op);
    return {};
  });
}

namespace detail {

void window_state::give_up(int owner, std::string why) noexcept {
  const std::lock_guard<std::mutex> hold(map_lock);
  give_up_locked(owner, std::move(why));
}

void window_state::give_up_locked(int owner, std::string why) noexcept {
  window_slot& slot = slots[owner];
  // A slot given up keeps its first reason (what made the peer unreachable); written under map_lock, which
  // unmapped_reason() takes to read it.
  if (!slot.given_up) slot.reason = std::move(why);
  slot.mapped.store(false, std::memory_order_release);
  std::size_t bytes = 0;  // chunks lie back to back from the slot's start
  for (const auto& c : slot.chunks) bytes += c.size();
  try {
    if (bytes > 0) (void)range.unmap(static_cast<std::size_t>(owner) * stride, bytes);
  } catch (...) {  // the error's text could not be made: releasing the window unmaps what is left
  }
  slot.chunks.clear();  // the imports let go: a dead peer's memory is freed once no process maps it
  slot.given_up = true;
}

std::vector<std::size_t> window_state::chunk_counts() {
  const std::lock_guard<std::mutex> hold(map_lock);
  std::vector<std::size_t> out;
  for (const auto& s : slots) out.push_back(s.chunks.size());
  return out;
}

void window_state::undo_step(const std::vector<std::size_t>& kept) noexcept {
  const std::lock_guard<std::mutex> hold(map_lock);
  for (std::size_t r = 0; r < slots.size(); ++r) {
    window_slot& slot = slots[r];
    if (slot.chunks.size() <= kept[r]) continue;
    std::size_t from = 0, bytes = 0;
    for (std::size_t i = 0; i < slot.chunks.size(); ++i) (i < kept[r] ? from : bytes) += slot.chunks[i].size();
    try {
      (void)range.unmap(r * stride + from, bytes);
    } catch (...) {  // as in give_up: releasing the window unmaps what is left
    }
    slot.chunks.erase(slot.chunks.begin() + static_cast<std::ptrdiff_t>(kept[r]), slot.chunks.end());
    if (slot.chunks.empty()) slot.mapped.store(false, std::memory_order_release);
  }
}

void window_state::unmap_peers(const std::string& why) noexcept {
  if (signals_ready.load(std::memory_order_acquire)) signals->raise_abort(rank());  // first: waits end, then unmap
  if (keep_peers_on_abort.load(std::memory_order_acquire)) return;                  // signal pads: see window_state
  // Only map_lock, held around each unmap: a step in progress may be inside the user's bootstrap, and abort()
  // never waits on it (the step sees the abort within a slice, or maps nothing more: map_peer_chunk).
  for (int r = 0; r < static_cast<int>(slots.size()); ++r) {
    if (r == rank()) continue;
    const std::lock_guard<std::mutex> hold(map_lock);
    if (slots[r].chunks.empty()) continue;
    try {
      give_up_locked(r, why);
    } catch (...) {  // no memory to copy the text: the slot goes all the same
      give_up_locked(r, std::string());
    }
  }
}

}  // namespace detail

status symmetric_window::release() noexcept {
  return detail::release_local(state_, "pvmm::symmetric_window::release", "window");
}

void* symmetric_window::base() const noexcept { return state_ ? state_->range.address() : nullptr; }
std::size_t symmetric_window::stride() const noexcept { return state_ ? state_->stride : 0; }
int symmetric_window::rank() const noexcept { return state_ ? state_->rank() : -1; }
int symmetric_window::size() const noexcept { return state_ ? static_cast<int>(state_->slots.size()) : 0; }

std::size_t symmetric_window::size_of(int r) const noexcept {
  return state_ && r >= 0 && r < size() ? state_->slots[r].size : 0;
}

void* symmetric_window::peer(int r) const noexcept {
  if (!state_ || r < 0 || r >= size() || !state_->slots[r].mapped) return nullptr;
  return state_->range.at<unsigned char>(r * state_->stride);
}

std::string symmetric_window::unmapped_reason(int r) const {
  if (!state_) return "the window is empty";
  if (r < 0 || r >= size()) return fmt::format("rank {} is not in this window of {} ranks", r, size());
  const std::lock_guard<std::mutex> hold(state_->map_lock);  // a step or abort may be giving the slot up
  return state_->slots[r].mapped ? std::string() : state_->slots[r].reason;
}

std::vector<void*> symmetric_window::pointer_table() const {
  std::vector<void*> out;
  for (int r = 0; r < size(); ++r) out.push_back(peer(r));
  return out;
}

}  // namespace pvmm
