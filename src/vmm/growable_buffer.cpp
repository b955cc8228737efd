// growable_buffer: chunks mapped on demand at the tail of one or more adjacent reservations.
#include <algorithm>
#include <atomic>
#include <string>

#include <fmt/format.h>

#include <pvmm/device.hpp>
#include <pvmm/growable_buffer.hpp>

#include "core/checked_math.hpp"
#include "core/describe.hpp"
#include "core/device.hpp"
#include "core/operation.hpp"

namespace pvmm {

namespace {
// Default chunk size, measured by `pvmm-bench batching` on H200 (README "Performance"): growing to 2 GiB in
// 2 MiB requests took 52.9 ms with a create/map/grant per request, and with chunks of 8 / 32 / 64 / 128 / 256 MiB
// 14.1 / 4.1 / 2.1 / 1.8 / 1.5 ms. The grant call dominates; past 64 MiB the gain flattens while the memory
// mapped ahead of use keeps growing, so 64 MiB it is.
constexpr std::size_t default_chunk_bytes = std::size_t{64} << 20;
constexpr std::size_t default_reserve_bytes = std::size_t{1} << 30;

using detail::checked_add;
using detail::checked_mul;
using detail::checked_round_up;

error too_large(const detail::operation& op, const std::string& what) {
  return op.fail(errc::out_of_memory, fmt::format("{} exceeds the address space", what));
}

/// Marks a buffer in use for one call: a second thread calling in meanwhile gets errc::busy instead of
/// racing on the chunk list (growable_buffer is not thread-safe; misuse must not corrupt, invariant 15).
class exclusive_use {
 public:
  explicit exclusive_use(std::atomic<bool>& flag) noexcept : flag_(flag), owned_(!flag.exchange(true)) {}
  ~exclusive_use() {
    if (owned_) flag_.store(false);
  }
  explicit operator bool() const noexcept { return owned_; }

 private:
  std::atomic<bool>& flag_;
  bool owned_;
};
}  // namespace

struct growable_buffer::state {
  growable_options options;
  std::atomic<bool> in_use{false};
  std::size_t chunk = 0;
  std::vector<address_reservation> ranges;  // adjacent, in address order
  std::vector<physical_allocation> chunks;  // mapped back to back from the start of ranges[0]

  char* base() const { return static_cast<char*>(ranges.front().address()); }
  std::size_t capacity() const {
    std::size_t c = 0;
    for (auto& r : ranges) c += r.size();
    return c;
  }

  /// Calls f(range, local offset, length) for each piece of [offset, offset + size) per range.
  template <class F>
  status for_each_piece(std::vector<address_reservation>& rs, std::size_t offset, std::size_t size, F&& f) {
    std::size_t start = 0;
    for (auto& r : rs) {
      const std::size_t end = start + r.size();
      const std::size_t lo = std::max(offset, start), hi = std::min(offset + size, end);
      if (lo < hi)
        if (auto ok = f(r, lo - start, hi - lo); !ok) return ok;
      start = end;
    }
    return {};
  }

  status grant(std::vector<address_reservation>& rs, std::size_t offset, std::size_t size) {
    return for_each_piece(rs, offset, size, [&](address_reservation& r, std::size_t off, std::size_t len) {
      return r.set_access(off, len, options.access.data(), options.access.size());
    });
  }

  /// Maps chunks[first..) from `first * chunk` into `rs`; on failure unmaps what it mapped.
  status map_chunks(std::vector<address_reservation>& rs, const physical_allocation* source, std::size_t count,
                    std::size_t first_slot) {
    std::size_t mapped = 0;
    status ok;
    for (std::size_t i = 0; i < count && ok; ++i) {
      ok = for_each_piece(rs, (first_slot + i) * chunk, chunk,
                          [&](address_reservation& r, std::size_t off, std::size_t len) -> status {
                            auto p = r.map(off, source[i], 0, len);
                            if (!p) return std::move(p).error();
                            return {};
                          });
      if (ok) ++mapped;
    }
    if (!ok) (void)unmap_slots(rs, first_slot, mapped);
    return ok;
  }

  /// Unmaps and releases chunks[want..), last first. On a failure the chunks already unmapped are mapped and
  /// granted again, so the buffer is as it was; should that fail too, the chunk list is cut to what is still
  /// mapped, so size() never covers a hole.
  status shrink_to(std::size_t want) {
    std::size_t slot = chunks.size();
    status outcome;
    while (slot > want) {
      outcome = unmap_slots(ranges, slot - 1, 1);
      if (!outcome) break;
      --slot;
    }
    if (outcome) {
      chunks.resize(want);  // the mappings are gone; the chunks release here
      return outcome;
    }
    const std::size_t count = chunks.size() - slot;  // unmapped before the failure
    if (count == 0 ||
        (map_chunks(ranges, chunks.data() + slot, count, slot) && grant(ranges, slot * chunk, count * chunk)))
      return outcome;  // restored: the buffer is as before the call
    (void)unmap_slots(ranges, slot, count);
    chunks.resize(slot);
    return outcome;
  }

  status unmap_slots(std::vector<address_reservation>& rs, std::size_t first_slot, std::size_t count) {
    if (count == 0) return {};
    return for_each_piece(rs, first_slot * chunk, count * chunk,
                          [&](address_reservation& r, std::size_t off, std::size_t len) { return r.unmap(off, len); });
  }
};

void growable_buffer::state_deleter::operator()(state* s) const noexcept { delete s; }
growable_buffer::growable_buffer(state_owner s) noexcept : state_(std::move(s)) {}

void* growable_buffer::data() const noexcept { return state_ ? state_->base() : nullptr; }
std::size_t growable_buffer::size() const noexcept { return state_ ? state_->chunks.size() * state_->chunk : 0; }
std::size_t growable_buffer::capacity() const noexcept { return state_ ? state_->capacity() : 0; }
std::size_t growable_buffer::chunk_size() const noexcept { return state_ ? state_->chunk : 0; }
std::size_t growable_buffer::reservation_count() const noexcept { return state_ ? state_->ranges.size() : 0; }
const std::vector<physical_allocation>& growable_buffer::chunks() const noexcept {
  static const std::vector<physical_allocation> none;
  return state_ ? state_->chunks : none;
}

status growable_buffer::release() noexcept {
  const detail::operation op{"pvmm::growable_buffer::release"};
  if (!state_) return op.fail(errc::already_released, "this growable_buffer is empty (released or moved from)");
  {
    exclusive_use guard(state_->in_use);
    if (!guard) return op.fail(errc::busy, "another thread is resizing this growable_buffer");
    if (auto ok = state_->shrink_to(0); !ok) return op.wrap(std::move(ok).error());
    // Last range first: what is left stays one adjacent run from the buffer's address, should a release fail.
    while (!state_->ranges.empty()) {
      if (auto ok = state_->ranges.back().release(); !ok) return op.wrap(std::move(ok).error());
      state_->ranges.pop_back();
    }
  }
  state_.reset();
  return {};
}

result<growable_buffer> growable_buffer::create(const growable_options& options) {
  auto args = [&] {
    return fmt::format("properties={}, chunk_size={:#x}, reserve_size={:#x}, grants={}",
                       detail::describe(options.properties), options.chunk_size, options.reserve_size,
                       options.access.size());
  };
  const detail::operation op{"pvmm::growable_buffer::create", args};
  if (options.access.empty())
    return op.fail(errc::invalid_argument, "no device to grant access to", "add at least one access_descriptor");
  // Every grant is checked now, not at the first resize: a buffer that cannot grow must not be created.
  for (std::size_t i = 0; i < options.access.size(); ++i) {
    const auto& a = options.access[i];
    if (auto ok = detail::check_location(a.location, op); !ok) return std::move(ok).error();
    if (a.access != access::read && a.access != access::read_write)
      return op.fail(errc::invalid_argument,
                     fmt::format("grant {} gives {} access; a buffer's devices need read or read_write", i,
                                 detail::describe(a.access)));
  }
  auto g = query_granularity(options.properties);
  if (!g) return std::move(g).error();
  state_owner s(new state());
  s->options = options;
  if (options.chunk_size) {
    s->chunk = options.chunk_size;
  } else {
    auto chunk = checked_round_up(default_chunk_bytes, g->recommended);
    if (!chunk) return too_large(op, "the default chunk rounded up to the recommended granularity");
    s->chunk = *chunk;
  }
  if (s->chunk % g->minimum != 0)
    return op.fail(errc::unaligned, fmt::format("chunk_size is not a multiple of the granularity {:#x}", g->minimum));
  auto reserve_bytes = checked_round_up(options.reserve_size ? options.reserve_size : default_reserve_bytes, s->chunk);
  if (!reserve_bytes) return too_large(op, "reserve_size rounded up to whole chunks");
  auto range = address_reservation::reserve(*reserve_bytes);
  if (!range) return std::move(range).error();
  s->ranges.push_back(std::move(*range));
  return growable_buffer(std::move(s));
}

result<resize_outcome> growable_buffer::resize(std::size_t size) {
  auto args = [&] { return fmt::format("size={:#x}", size); };
  const detail::operation op{"pvmm::growable_buffer::resize", args};
  if (!state_) return op.fail(errc::already_released, "this growable_buffer is empty");
  exclusive_use guard(state_->in_use);
  if (!guard)
    return op.fail(errc::busy, "another thread is resizing this growable_buffer",
                   "growable_buffer is not thread-safe: resize it from one thread at a time");
  auto& s = *state_;
  const std::size_t have = s.chunks.size();
  const auto rounded = checked_round_up(size, s.chunk);
  if (!rounded) return too_large(op, fmt::format("{:#x} bytes rounded up to {:#x}-byte chunks", size, s.chunk));
  const std::size_t want = *rounded / s.chunk;
  resize_outcome out;

  if (want <= have) {
    if (auto ok = s.shrink_to(want); !ok) return op.wrap(std::move(ok).error());
    out.chunks_removed = have - want;
    out.address = s.base();
    return out;
  }

  const std::size_t needed = *rounded;
  std::vector<address_reservation> ranges;  // the ranges after a move; committed only on success
  bool moved = false;
  // An adjacent range added below is taken back off if anything later fails: the buffer stays as it was.
  struct tail_guard {
    std::vector<address_reservation>* ranges = nullptr;
    ~tail_guard() {
      if (ranges) ranges->pop_back();
    }
  } added_tail;
  if (needed > s.capacity()) {
    // First choice: the addresses right after the buffer, so nothing moves. Capacity is at most half the
    // address space here (it was reserved), so doubling it cannot wrap; the rounding still is checked.
    const auto extra = checked_round_up(std::max(needed - s.capacity(), s.capacity()), s.chunk);
    if (!extra) return too_large(op, "the adjacent range needed");
    auto tail = address_reservation::reserve(*extra, 0, s.base() + s.capacity());
    if (tail) {
      s.ranges.push_back(std::move(*tail));
      added_tail.ranges = &s.ranges;
    } else if (tail.code() == errc::address_unavailable) {
      const auto doubled = checked_mul(s.capacity(), 2);
      const auto bigger_size = checked_round_up(std::max(needed, doubled.value_or(needed)), s.chunk);
      if (!bigger_size) return too_large(op, "the range to move into");
      auto bigger = address_reservation::reserve(*bigger_size);
      if (!bigger) return std::move(bigger).error();
      ranges.push_back(std::move(*bigger));
      if (auto ok = s.map_chunks(ranges, s.chunks.data(), s.chunks.size(), 0); !ok) return std::move(ok).error();
      if (have)
        if (auto ok = s.grant(ranges, 0, have * s.chunk); !ok) return std::move(ok).error();
      moved = true;
    } else {
      return std::move(tail).error();
    }
  }
  auto& target = moved ? ranges : s.ranges;

  std::vector<physical_allocation> fresh;
  fresh.reserve(want - have);
  for (std::size_t i = have; i < want; ++i) {
    auto c = physical_allocation::create(s.chunk, s.options.properties);
    if (!c) return std::move(c).error();
    fresh.push_back(std::move(*c));
  }
  if (auto ok = s.map_chunks(target, fresh.data(), fresh.size(), have); !ok) return std::move(ok).error();
  if (auto ok = s.grant(target, have * s.chunk, (want - have) * s.chunk); !ok) {
    (void)s.unmap_slots(target, have, want - have);
    return std::move(ok).error();
  }
  // Commit.
  added_tail.ranges = nullptr;
  for (auto& c : fresh) s.chunks.push_back(std::move(c));
  if (moved) s.ranges = std::move(ranges);  // the old ranges unmap and free here; chunks stay mapped in the new
  out.moved = moved;
  out.address = s.base();
  out.chunks_added = want - have;
  return out;
}

}  // namespace pvmm
