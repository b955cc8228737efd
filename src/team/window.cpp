// symmetric_window: the flat reservation, create and grow as collective chunk steps, and the accessors.
#include <optional>

#include <pvmm/device.hpp>
#include <pvmm/team.hpp>

#include <fmt/format.h>

#include "team/bootstrap_common.hpp"
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

symmetric_window::symmetric_window(std::shared_ptr<detail::window_state> state) noexcept : state_(std::move(state)) {}

result<symmetric_window> symmetric_window::create(const team& members, const window_options& options) {
  auto args = [&] {
    return fmt::format("rank={}, size={:#x}, max_size={:#x}, timeout={}ms", members.rank(), options.size,
                       options.max_size, options.timeout.count());
  };
  const detail::operation op{"pvmm::symmetric_window::create", args};
  if (!members.valid()) return op.fail(errc::invalid_argument, "the team is empty (released or moved from)");
  if (options.size == 0) return op.fail(errc::invalid_size, "a window slot holds at least one byte");
  if (options.max_size != 0 && options.max_size < options.size)
    return op.fail(errc::invalid_argument,
                   fmt::format("max_size {:#x} is below size {:#x}", options.max_size, options.size));
  if (options.timeout.count() < 0) return op.fail(errc::invalid_argument, "the timeout is negative");
  const deadline until = deadline_in(options.timeout);
  auto w = std::make_shared<detail::window_state>();
  w->team = members.state_;
  w->handles = w->team->handles;
  const std::size_t unit = w->team->slot_unit;
  const std::size_t requested_max = options.max_size ? options.max_size : options.size;
  if (requested_max > (std::size_t{1} << 46) / static_cast<std::size_t>(members.size()))
    return op.fail(errc::out_of_memory, fmt::format("{} slots of {:#x} bytes exceed the address space pvmm reserves",
                                                    members.size(), requested_max));
  w->max_size = round_up(requested_max, unit);
  w->stride = w->max_size;
  w->slots = std::vector<detail::window_slot>(members.size());  // built in place: a slot's flag is atomic
  w->team->adopt(w);
  auto range = address_reservation::reserve(w->stride * members.size());
  if (!range) {  // still take part, so the others fail at once naming this rank
    const auto e = op.wrap(std::move(range).error());
    auto announced = detail::exchange_chunks(*w, physical_allocation(), 0, 0, &e, until, op);
    return std::move(announced).error();  // this rank's own error (or the step's, if it failed earlier)
  }
  w->range = std::move(*range);
  PVMM_TRY(grow_slot(*w, round_up(options.size, unit), until, op));
  return symmetric_window(std::move(w));
}

status symmetric_window::grow(std::size_t new_size, std::chrono::milliseconds timeout) {
  auto args = [&] { return fmt::format("new_size={:#x}, timeout={}ms", new_size, timeout.count()); };
  const detail::operation op{"pvmm::symmetric_window::grow", args};
  if (!state_) return op.fail(errc::already_released, "this window is empty (released or moved from)");
  const deadline until = deadline_in(timeout.count() < 0 ? std::chrono::milliseconds(0) : timeout);
  const std::size_t rounded = round_up(new_size, state_->team->slot_unit);
  const std::size_t now = state_->slots[state_->rank()].size;
  std::optional<error> refused;
  if (timeout.count() < 0)
    refused = op.fail(errc::invalid_argument, "the timeout is negative");
  else if (new_size < now || rounded > state_->max_size)
    refused = op.fail(errc::out_of_range, fmt::format("a slot grows from {:#x} up to max_size {:#x}; {:#x} asked", now,
                                                      state_->max_size, new_size));
  // A refused argument still takes part in the step, so every rank fails at once naming this one.
  if (refused) return detail::exchange_chunks(*state_, physical_allocation(), now, 0, &*refused, until, op);
  return grow_slot(*state_, rounded, until, op);
}

namespace detail {

void window_state::give_up(int owner, std::string why) noexcept {
  window_slot& slot = slots[owner];
  slot.reason = std::move(why);  // before the flag clears: a reader that sees it cleared reads the reason
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

void window_state::unmap_peers(const std::string& why) noexcept {
  const std::lock_guard<std::mutex> hold(step_lock);  // a step in progress ends within a slice once aborted
  for (int r = 0; r < static_cast<int>(slots.size()); ++r) {
    if (r == rank() || slots[r].chunks.empty()) continue;
    try {
      give_up(r, why);
    } catch (...) {  // no memory to copy the text: the slot goes all the same
      give_up(r, std::string());
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
  return state_->slots[r].mapped ? std::string() : state_->slots[r].reason;
}

std::vector<void*> symmetric_window::pointer_table() const {
  std::vector<void*> out;
  for (int r = 0; r < size(); ++r) out.push_back(peer(r));
  return out;
}

}  // namespace pvmm
