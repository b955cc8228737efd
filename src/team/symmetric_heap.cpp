// symmetric_heap: a first-fit free list kept identically on every rank, each call's arguments checked in one
// allgather (team_exchange.hpp), and the window grown when no block fits.
#include <pvmm/symmetric_heap.hpp>

#include <algorithm>
#include <map>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "team/bootstrap_common.hpp"
#include "team/no_throw.hpp"
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

using block_map = std::map<std::size_t, std::size_t>;

// Map nodes made before a call's agreement, so that nothing after it allocates (docs/design.md, "nothing fallible
// after the agreement"): the free list changes by moving nodes between the maps and this reserve.
class spare_nodes {
 public:
  // Makes `count` nodes now (std::bad_alloc here, before the agreement, is the caller's to report).
  explicit spare_nodes(std::size_t count) {
    nodes_.reserve(count + 2);  // room for the nodes handed back too: give() never allocates
    block_map maker;
    for (std::size_t i = 0; i < count; ++i) maker.emplace(i, 0);
    while (!maker.empty()) nodes_.push_back(maker.extract(maker.begin()));
  }
  block_map::node_type take(std::size_t key, std::size_t value) noexcept {
    block_map::node_type n = std::move(nodes_.back());
    nodes_.pop_back();
    n.key() = key;
    n.mapped() = value;
    return n;
  }
  void give(block_map::node_type n) noexcept {
    if (nodes_.size() < nodes_.capacity()) nodes_.push_back(std::move(n));  // else freed with `n`
  }

 private:
  std::vector<block_map::node_type> nodes_;
};

// Adds [offset, offset + bytes) to the holes, merged with its neighbours. Allocates nothing (one spare node).
void add_hole(detail::heap_state& h, std::size_t offset, std::size_t bytes, spare_nodes& spare) noexcept {
  auto next = h.holes.lower_bound(offset);
  if (next != h.holes.end() && offset + bytes == next->first) {
    bytes += next->second;
    auto after = std::next(next);
    spare.give(h.holes.extract(next));
    next = after;
  }
  if (next != h.holes.begin()) {
    auto before = std::prev(next);
    if (before->first + before->second == offset) {
      before->second += bytes;
      return;
    }
  }
  h.holes.insert(spare.take(offset, bytes));
}

// The first hole that fits `bytes` at `alignment`: the block's offset, or nothing.
std::optional<std::size_t> first_fit(const detail::heap_state& h, std::size_t bytes, std::size_t alignment) {
  for (const auto& [offset, length] : h.holes) {
    const std::size_t start = round_to(offset, alignment);
    if (start - offset <= length && length - (start - offset) >= bytes) return start;
  }
  return std::nullopt;
}

// Takes [start, start + bytes) out of the hole that holds it. Allocates nothing (one spare node).
void carve(detail::heap_state& h, std::size_t start, std::size_t bytes, spare_nodes& spare) noexcept {
  auto node = h.holes.extract(std::prev(h.holes.upper_bound(start)));
  const std::size_t offset = node.key(), length = node.mapped();
  if (start > offset) {
    node.mapped() = start - offset;
    h.holes.insert(std::move(node));
  } else {
    spare.give(std::move(node));
  }
  if (offset + length > start + bytes) h.holes.insert(spare.take(start + bytes, offset + length - start - bytes));
}

// Every rank's request, checked: the same on every rank, or team_mismatch naming the first that differs. A second
// agreement closes the step: a check that fails on one rank alone (bytes its bootstrap handed it wrong) fails every
// rank at once naming it, rather than leaving the others to go on (or into a grow) without it.
status agree_request(detail::heap_state& h, const heap_request& mine, const std::optional<error>& refused,
                     deadline until, const detail::operation& op) {
  detail::window_state& w = *detail::window_access::of(h.window);
  detail::team_state& t = *w.team;
  PVMM_TRY(detail::check_aborted(t, op));
  bool exchanged = false;
  auto all =
      detail::all_gather(*t.ranks, t.next_step++, mine, refused, "allgather heap request", until, op, &exchanged);
  if (!all && !exchanged) return std::move(all).error();  // the bootstrap failed: it tells the peers
  auto checked = [&]() -> status {
    if (!all) return std::move(all).error();
    const auto& a = *all;
    for (int r = 1; r < t.size(); ++r)
      if (a[r].kind != a[0].kind || a[r].size != a[0].size || a[r].alignment != a[0].alignment)
        return op.fail(errc::team_mismatch,
                       fmt::format("rank {} asked to {} {:#x} (alignment {:#x}), rank 0 to {} {:#x} (alignment {:#x})",
                                   r, kind_name(a[r].kind), a[r].size, a[r].alignment, kind_name(a[0].kind), a[0].size,
                                   a[0].alignment),
                       "call the heap's collectives in the same order with the same arguments on every rank");
    return {};
  }();
  std::optional<error> failed;
  if (!checked) failed = std::move(checked).error();
  return detail::agree(t, t.next_step++, failed, "heap request checked", until, op);
}

// Grows the window so a block of `bytes` at `alignment` fits at its end: doubling, at least to fit, at most
// max_size. The same decision on every rank (the same free list); the grow itself is one collective step.
status grow_to_fit(detail::heap_state& h, std::size_t bytes, std::size_t alignment, spare_nodes& spare, deadline until,
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
  add_hole(h, h.capacity, target - h.capacity, spare);
  h.capacity = target;
  ++h.grows;
  return {};
}

}  // namespace

symmetric_heap::symmetric_heap(std::shared_ptr<detail::heap_state> state) noexcept : state_(std::move(state)) {}

namespace {
// The heap's state over `window` (local; may fail only for want of memory).
result<std::shared_ptr<detail::heap_state>> make_state(symmetric_window& window, const detail::operation& op) {
  if (!window.valid()) return op.fail(errc::invalid_argument, "the window is empty (released or moved from)");
  return detail::no_throw<result<std::shared_ptr<detail::heap_state>>>(
      op.name(), [&]() -> result<std::shared_ptr<detail::heap_state>> {
        auto h = std::make_shared<detail::heap_state>();
        std::size_t smallest = window.size_of(0);
        for (int r = 1; r < window.size(); ++r) smallest = std::min(smallest, window.size_of(r));
        h->capacity = smallest;
        h->max_size = window.stride();
        h->unit = detail::window_access::of(window)->team->slot_unit;
        if (h->capacity > 0) h->holes.emplace(0, h->capacity);
        h->window = std::move(window);  // last: nothing after it can fail
        return h;
      });
}
}  // namespace

result<symmetric_heap> symmetric_heap::create(const team& members, const heap_options& options) {
  auto args = [&] {
    return fmt::format("size={:#x}, max_size={:#x}, timeout={}ms", options.size, options.max_size,
                       options.timeout.count());
  };
  const detail::operation op{"pvmm::symmetric_heap::create", args};
  return detail::no_throw<result<symmetric_heap>>(op.name(), [&]() -> result<symmetric_heap> {
    window_options o;
    o.size = options.size;
    o.max_size = options.max_size == 0 ? options.size : options.max_size;
    o.timeout = options.timeout;
    auto made = symmetric_window::create(members, o);
    if (!made) return op.wrap(std::move(made).error());
    // The heap's state is made after the window's last agreement: a second agreement closes the step, so a rank
    // that could not make it fails every rank alike.
    auto team = detail::window_access::of(*made)->team;
    auto state = make_state(*made, op);
    std::optional<error> failed;
    if (!state) failed = state.error();
    const deadline until = deadline_in(options.timeout.count() < 0 ? std::chrono::milliseconds(0) : options.timeout);
    PVMM_TRY(detail::agree(*team, team->next_step++, failed, "heap state made", until, op));
    return symmetric_heap(std::move(*state));
  });
}

result<symmetric_heap> symmetric_heap::over(symmetric_window window) {
  const detail::operation op{"pvmm::symmetric_heap::over"};
  PVMM_TRY_ASSIGN(state, make_state(window, op));
  return symmetric_heap(std::move(state));
}

namespace {
// The deadline a call's step runs under: its own timeout, or, where that timeout is refused, the default, so the
// refusal still reaches every rank (each then fails with invalid_argument naming this one, whatever the order in
// which they arrive).
deadline step_deadline(std::chrono::milliseconds timeout) {
  return deadline_in(timeout.count() < 0 ? std::chrono::milliseconds(30000) : timeout);
}
}  // namespace

result<symmetric_block> symmetric_heap::allocate(std::size_t size, std::size_t alignment,
                                                 std::chrono::milliseconds timeout) {
  auto args = [&] {
    return fmt::format("size={:#x}, alignment={:#x}, timeout={}ms", size, alignment, timeout.count());
  };
  const detail::operation op{"pvmm::symmetric_heap::allocate", args};
  return detail::no_throw<result<symmetric_block>>(op.name(), [&]() -> result<symmetric_block> {
    if (!state_) return op.fail(errc::already_released, "this heap is empty (released or moved from)");
    detail::heap_state& h = *state_;
    const deadline until = step_deadline(timeout);
    std::optional<error> refused;  // still taking part, so every rank fails at once naming this one
    const int me = h.window.rank();
    if (auto bad = detail::check_timeout(timeout, "timeout", op); !bad)
      refused = op.fail(bad.code(), fmt::format("rank {}: {}", me, bad.error().detail));
    else if (size == 0)
      refused = op.fail(errc::invalid_size, fmt::format("rank {}: a block holds at least one byte", me));
    else if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > h.max_size)
      refused = op.fail(errc::invalid_alignment, fmt::format("rank {}: alignment {:#x} is not a power of two up to "
                                                             "{:#x}",
                                                             me, alignment, h.max_size));
    // Every node the free list may need, made before the agreement.
    std::optional<spare_nodes> spare;
    try {
      spare.emplace(3);  // carve: one; the block's record: one; a grow's new hole: one
    } catch (const std::bad_alloc&) {
      if (!refused) refused = op.fail(errc::out_of_memory, fmt::format("rank {}: no memory for the free list", me));
    }
    PVMM_TRY(agree_request(h, heap_request{1, 0, size, alignment}, refused, until, op));
    // The same on every rank from here: the same free list, the same arguments.
    if (size > h.max_size)
      return op.fail(errc::out_of_memory, fmt::format("{:#x} bytes exceed the heap's max_size {:#x}", size, h.max_size),
                     "make the heap with a larger max_size");
    const std::size_t bytes = round_to(size, min_alignment);
    const std::size_t align = std::max(alignment, min_alignment);
    auto at = first_fit(h, bytes, align);
    if (!at) {
      PVMM_TRY(grow_to_fit(h, bytes, align, *spare, until, op));
      at = first_fit(h, bytes, align);
      if (!at) return op.fail(errc::out_of_memory, "the grown heap has no room for the block");
    }
    carve(h, *at, bytes, *spare);
    h.used.insert(spare->take(*at, bytes));
    h.in_use += bytes;
    h.peak = std::max(h.peak, h.in_use);
    return symmetric_block(&h.window, *at, size);
  });
}

status symmetric_heap::free(std::size_t offset, std::chrono::milliseconds timeout) {
  auto args = [&] { return fmt::format("offset={:#x}, timeout={}ms", offset, timeout.count()); };
  const detail::operation op{"pvmm::symmetric_heap::free", args};
  return detail::no_throw<status>(op.name(), [&]() -> status {
    if (!state_) return op.fail(errc::already_released, "this heap is empty (released or moved from)");
    detail::heap_state& h = *state_;
    const deadline until = step_deadline(timeout);
    std::optional<error> refused;
    if (auto bad = detail::check_timeout(timeout, "timeout", op); !bad)
      refused = op.fail(bad.code(), fmt::format("rank {}: {}", h.window.rank(), bad.error().detail));
    std::optional<spare_nodes> spare;
    try {
      spare.emplace(1);  // the hole's node (the block's own record becomes it; this one is for a merge's order)
    } catch (const std::bad_alloc&) {
      if (!refused)
        refused = op.fail(errc::out_of_memory, fmt::format("rank {}: no memory for the free list", h.window.rank()));
    }
    PVMM_TRY(agree_request(h, heap_request{2, 0, offset, 0}, refused, until, op));
    const auto block = h.used.find(offset);
    if (block == h.used.end())  // the same on every rank: every rank's list is the same
      return op.fail(errc::invalid_argument, fmt::format("no block of this heap starts at offset {:#x}", offset));
    auto node = h.used.extract(block);
    const std::size_t bytes = node.mapped();
    spare->give(std::move(node));
    add_hole(h, offset, bytes, *spare);
    h.in_use -= bytes;
    return {};
  });
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
