// symmetric_heap: a first-fit free list kept identically on every rank, each call's arguments checked in one
// allgather (team_exchange.hpp), and the window grown when no block fits.
#include <pvmm/symmetric_heap.hpp>

#include <algorithm>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "team/bootstrap_common.hpp"
#include "team/team_exchange.hpp"
#include "team/window_state.hpp"

namespace pvmm {
namespace detail {

struct heap_state {
  symmetric_window window;
  std::size_t capacity = 0;
  std::size_t max_size = 0;
  std::size_t unit = 0;                      // the window's slot unit: growth is in whole units
  std::map<std::size_t, std::size_t> holes;  // offset -> bytes, free, coalesced
  std::map<std::size_t, std::size_t> used;   // offset -> bytes (rounded), live blocks
  std::size_t in_use = 0, peak = 0, grows = 0;
};

}  // namespace detail

namespace {

// What every rank asks of one heap call (fixed layout; compared across ranks).
struct heap_request {
  std::uint32_t kind = 0;  // 1: allocate, 2: free
  std::uint32_t reserved = 0;
  std::uint64_t size = 0;       // allocate: bytes; free: the offset
  std::uint64_t alignment = 0;  // allocate only
};

std::size_t round_to(std::size_t value, std::size_t unit) { return (value + unit - 1) / unit * unit; }

const char* kind_name(std::uint32_t kind) { return kind == 1 ? "allocate" : kind == 2 ? "free" : "?"; }

// Adds [offset, offset + bytes) to the holes, merged with its neighbours.
void add_hole(detail::heap_state& h, std::size_t offset, std::size_t bytes) {
  auto next = h.holes.lower_bound(offset);
  if (next != h.holes.end() && offset + bytes == next->first) {
    bytes += next->second;
    next = h.holes.erase(next);
  }
  if (next != h.holes.begin()) {
    auto before = std::prev(next);
    if (before->first + before->second == offset) {
      before->second += bytes;
      return;
    }
  }
  h.holes.emplace(offset, bytes);
}

// The first hole that fits `bytes` at `alignment`: the block's offset, or nothing.
std::optional<std::size_t> first_fit(const detail::heap_state& h, std::size_t bytes, std::size_t alignment) {
  for (const auto& [offset, length] : h.holes) {
    const std::size_t start = round_to(offset, alignment);
    if (start - offset <= length && length - (start - offset) >= bytes) return start;
  }
  return std::nullopt;
}

// Takes [start, start + bytes) out of the hole that holds it.
void carve(detail::heap_state& h, std::size_t start, std::size_t bytes) {
  auto hole = std::prev(h.holes.upper_bound(start));
  const std::size_t offset = hole->first, length = hole->second;
  h.holes.erase(hole);
  if (start > offset) h.holes.emplace(offset, start - offset);
  if (offset + length > start + bytes) h.holes.emplace(start + bytes, offset + length - start - bytes);
}

// Every rank's request, checked: the same on every rank, or team_mismatch naming the first that differs.
status agree_request(detail::heap_state& h, const heap_request& mine, const std::optional<error>& refused,
                     deadline until, const detail::operation& op) {
  detail::window_state& w = *detail::window_access::of(h.window);
  detail::team_state& t = *w.team;
  PVMM_TRY(detail::check_aborted(t, op));
  PVMM_TRY_ASSIGN(all, detail::all_gather(*t.ranks, t.next_step++, mine, refused, "allgather heap request", until, op));
  for (int r = 1; r < t.size(); ++r)
    if (all[r].kind != all[0].kind || all[r].size != all[0].size || all[r].alignment != all[0].alignment)
      return op.fail(errc::team_mismatch,
                     fmt::format("rank {} asked to {} {:#x} (alignment {:#x}), rank 0 to {} {:#x} (alignment {:#x})", r,
                                 kind_name(all[r].kind), all[r].size, all[r].alignment, kind_name(all[0].kind),
                                 all[0].size, all[0].alignment),
                     "call the heap's collectives in the same order with the same arguments on every rank");
  return {};
}

// Grows the window so a block of `bytes` at `alignment` fits at its end: doubling, at least to fit, at most
// max_size. The same decision on every rank (the same free list); the grow itself is one collective step.
status grow_to_fit(detail::heap_state& h, std::size_t bytes, std::size_t alignment, deadline until,
                   const detail::operation& op) {
  std::size_t tail = h.capacity;  // where a block at the end could start: the last hole, if it reaches the end
  if (!h.holes.empty()) {
    const auto& last = *h.holes.rbegin();
    if (last.first + last.second == h.capacity) tail = last.first;
  }
  const std::size_t start = round_to(tail, alignment);
  if (start > h.max_size || bytes > h.max_size - start)
    return op.fail(errc::out_of_memory,
                   fmt::format("{:#x} bytes at alignment {:#x} do not fit: {:#x} of the heap's {:#x} are in use, it "
                               "spans {:#x} and grows to at most {:#x}",
                               bytes, alignment, h.in_use, h.capacity, h.capacity, h.max_size),
                   "free blocks, or make the heap with a larger max_size");
  const std::size_t wanted = std::max(start + bytes, std::min(h.max_size, 2 * h.capacity));
  const std::size_t target = std::min(h.max_size, round_to(wanted, h.unit));
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
  const std::size_t own = h.window.size_of(h.window.rank());
  PVMM_TRY(h.window.grow(std::max(target, own), std::max(left, std::chrono::milliseconds(0))));
  add_hole(h, h.capacity, target - h.capacity);
  h.capacity = target;
  ++h.grows;
  return {};
}

}  // namespace

symmetric_heap::symmetric_heap(std::shared_ptr<detail::heap_state> state) noexcept : state_(std::move(state)) {}

result<symmetric_heap> symmetric_heap::create(const team& members, const heap_options& options) {
  auto args = [&] {
    return fmt::format("size={:#x}, max_size={:#x}, timeout={}ms", options.size, options.max_size,
                       options.timeout.count());
  };
  const detail::operation op{"pvmm::symmetric_heap::create", args};
  window_options o;
  o.size = options.size;
  o.max_size = options.max_size == 0 ? options.size : options.max_size;
  o.timeout = options.timeout;
  auto made = symmetric_window::create(members, o);
  if (!made) return op.wrap(std::move(made).error());
  return over(std::move(*made));
}

result<symmetric_heap> symmetric_heap::over(symmetric_window window) {
  const detail::operation op{"pvmm::symmetric_heap::over"};
  if (!window.valid()) return op.fail(errc::invalid_argument, "the window is empty (released or moved from)");
  try {
    auto h = std::make_shared<detail::heap_state>();
    std::size_t smallest = window.size_of(0);
    for (int r = 1; r < window.size(); ++r) smallest = std::min(smallest, window.size_of(r));
    h->capacity = smallest;
    h->max_size = window.stride();
    h->unit = detail::window_access::of(window)->team->slot_unit;
    h->window = std::move(window);
    if (h->capacity > 0) h->holes.emplace(0, h->capacity);
    return symmetric_heap(std::move(h));
  } catch (const std::bad_alloc&) {
    return op.fail(errc::out_of_memory, "no host memory for the heap's state");
  }
}

result<symmetric_block> symmetric_heap::allocate(std::size_t size, std::size_t alignment,
                                                 std::chrono::milliseconds timeout) {
  auto args = [&] {
    return fmt::format("size={:#x}, alignment={:#x}, timeout={}ms", size, alignment, timeout.count());
  };
  const detail::operation op{"pvmm::symmetric_heap::allocate", args};
  if (!state_) return op.fail(errc::already_released, "this heap is empty (released or moved from)");
  detail::heap_state& h = *state_;
  const deadline until = deadline_in(timeout.count() < 0 ? std::chrono::milliseconds(0) : timeout);
  std::optional<error> refused;  // still taking part, so every rank fails at once naming this one
  const int me = h.window.rank();
  if (timeout.count() < 0)
    refused = op.fail(errc::invalid_argument, fmt::format("rank {}: the timeout is negative", me));
  else if (size == 0 || size > h.max_size)
    refused = op.fail(errc::invalid_size,
                      fmt::format("rank {}: a block holds 1 to {:#x} bytes; {:#x} asked", me, h.max_size, size));
  else if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > h.max_size)
    refused = op.fail(errc::invalid_alignment, fmt::format("rank {}: alignment {:#x} is not a power of two up to {:#x}",
                                                           me, alignment, h.max_size));
  const heap_request mine{1, 0, size, alignment};
  PVMM_TRY(agree_request(h, mine, refused, until, op));
  const std::size_t bytes = round_to(size, min_alignment);
  const std::size_t align = std::max(alignment, min_alignment);
  try {
    auto at = first_fit(h, bytes, align);
    if (!at) {
      PVMM_TRY(grow_to_fit(h, bytes, align, until, op));
      at = first_fit(h, bytes, align);
      if (!at) return op.fail(errc::out_of_memory, "the grown heap has no room for the block");
    }
    carve(h, *at, bytes);
    h.used.emplace(*at, bytes);
    h.in_use += bytes;
    h.peak = std::max(h.peak, h.in_use);
    return symmetric_block(&h.window, *at, size);
  } catch (const std::bad_alloc&) {  // the lists are then no longer the same on every rank: the heap is lost
    return op.fail(errc::out_of_memory, "no host memory for the heap's free list");
  }
}

status symmetric_heap::free(std::size_t offset, std::chrono::milliseconds timeout) {
  auto args = [&] { return fmt::format("offset={:#x}, timeout={}ms", offset, timeout.count()); };
  const detail::operation op{"pvmm::symmetric_heap::free", args};
  if (!state_) return op.fail(errc::already_released, "this heap is empty (released or moved from)");
  detail::heap_state& h = *state_;
  const deadline until = deadline_in(timeout.count() < 0 ? std::chrono::milliseconds(0) : timeout);
  std::optional<error> refused;
  if (timeout.count() < 0)
    refused = op.fail(errc::invalid_argument, fmt::format("rank {}: the timeout is negative", h.window.rank()));
  PVMM_TRY(agree_request(h, heap_request{2, 0, offset, 0}, refused, until, op));
  const auto block = h.used.find(offset);
  if (block == h.used.end())  // the same on every rank: every rank's list is the same
    return op.fail(errc::invalid_argument, fmt::format("no block of this heap starts at offset {:#x}", offset));
  try {
    add_hole(h, block->first, block->second);
  } catch (const std::bad_alloc&) {
    return op.fail(errc::out_of_memory, "no host memory for the heap's free list");
  }
  h.in_use -= block->second;
  h.used.erase(block);
  return {};
}

heap_statistics symmetric_heap::statistics() const noexcept {
  heap_statistics s;
  if (!state_) return s;
  s.capacity = state_->capacity;
  s.max_size = state_->max_size;
  s.bytes_in_use = state_->in_use;
  s.peak_bytes_in_use = state_->peak;
  s.bytes_free = state_->capacity - state_->in_use;
  s.allocation_count = state_->used.size();
  s.grow_count = state_->grows;
  return s;
}

const symmetric_window& symmetric_heap::window() const noexcept {
  static const symmetric_window none;
  return state_ ? state_->window : none;
}

status symmetric_heap::release() noexcept {
  const detail::operation op{"pvmm::symmetric_heap::release"};
  if (!state_) return op.fail(errc::already_released, "this heap is empty (released or moved from)");
  auto state = std::move(state_);
  return state->window.release();
}

}  // namespace pvmm
