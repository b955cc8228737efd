// growable_arena: a best-fit free list over one growable_buffer (include/pvmm/growable_arena.hpp).
#include <algorithm>
#include <iterator>
#include <map>
#include <mutex>
#include <utility>

#include <fmt/format.h>

#include <pvmm/device.hpp>
#include <pvmm/growable_arena.hpp>
#include <pvmm/growable_buffer.hpp>

#include "core/operation.hpp"
#include "core/pimpl_moves.hpp"

namespace pvmm {

struct growable_arena::state {
  int device = 0;
  mutable std::mutex lock;  // guards everything below; held across driver calls only, never while user code runs
  growable_buffer buffer;
  std::map<std::size_t, std::size_t> live;  // offset -> size
  std::map<std::size_t, std::size_t> free;  // offset -> size, coalesced, all below top
  std::size_t top = 0;                      // the end of the highest allocation
  arena_stats counters;

  status map_to(std::size_t size, const detail::operation& op) {
    const std::size_t before = buffer.size();
    auto out = buffer.resize(size);
    if (!out) return op.wrap(std::move(out).error());
    if (out->moved)  // cannot happen within the reservation; live allocations would have changed address
      return op.fail(errc::backend_error, "the arena's buffer moved within its reservation");
    if (buffer.size() > before) ++counters.grows;
    if (buffer.size() < before) ++counters.shrinks;
    counters.mapped_bytes = buffer.size();
    counters.peak_mapped_bytes = std::max(counters.peak_mapped_bytes, counters.mapped_bytes);
    return {};
  }
  std::map<std::size_t, std::size_t>::const_iterator find(const void* pointer) const {
    const auto at = reinterpret_cast<std::uintptr_t>(pointer);
    const auto base = reinterpret_cast<std::uintptr_t>(buffer.data());
    return at >= base ? live.find(at - base) : live.end();
  }
};

PVMM_PIMPL_MOVES(growable_arena)
growable_arena::~growable_arena() {
  if (state_ && !state_->live.empty()) (void)state_.release();  // live memory stays mapped (invariant 17)
}

result<growable_arena> growable_arena::create(const arena_options& options) {
  auto args = [&] {
    return fmt::format("device={}, reserve_size={:#x}, chunk_size={:#x}", options.device, options.reserve_size,
                       options.chunk_size);
  };
  const detail::operation op{"pvmm::growable_arena::create", args};
  std::size_t reserve = options.reserve_size;
  if (reserve == 0) {
    auto info = query_device(options.device);
    if (!info) return op.wrap(std::move(info).error());
    reserve = info->total_memory;
  }
  growable_options o;
  o.properties.location = location::device(options.device);
  o.access = {{location::device(options.device), access::read_write}};
  o.chunk_size = options.chunk_size;
  o.reserve_size = reserve;
  auto buffer = growable_buffer::create(o);
  if (!buffer) return op.wrap(std::move(buffer).error());
  auto s = std::make_unique<state>();
  s->device = options.device;
  s->buffer = std::move(buffer).value();
  s->counters.reserved_bytes = s->buffer.capacity();
  return growable_arena(std::move(s));
}

result<void*> growable_arena::allocate(std::size_t size) {
  auto args = [&] { return fmt::format("size={:#x}", size); };
  const detail::operation op{"pvmm::growable_arena::allocate", args};
  if (!state_) return op.fail(errc::already_released, "this growable_arena is empty (released or moved from)");
  if (size == 0) return op.fail(errc::invalid_size, "size is 0");
  auto& s = *state_;
  const std::size_t capacity = s.buffer.capacity();
  if (size > capacity)
    return op.fail(errc::out_of_memory,
                   fmt::format("{} bytes exceed the arena's reservation of {} bytes", size, capacity),
                   "create the arena with a larger reserve_size");
  const std::size_t bytes = (size + alignment - 1) / alignment * alignment;  // size <= capacity: no overflow
  std::lock_guard<std::mutex> guard(s.lock);
  // Best fit among the freed blocks below the top (the smallest that holds `bytes`), else at the top.
  auto best = s.free.end();
  for (auto it = s.free.begin(); it != s.free.end(); ++it)
    if (it->second >= bytes && (best == s.free.end() || it->second < best->second)) best = it;
  std::size_t offset = s.top;
  if (best != s.free.end()) {
    offset = best->first;
    const std::size_t left = best->second - bytes;
    s.free.erase(best);
    if (left) s.free.emplace(offset + bytes, left);
  } else {
    if (bytes > capacity - s.top)
      return op.fail(errc::out_of_memory,
                     fmt::format("the arena's reservation of {} bytes is full ({} bytes allocated, {} more asked)",
                                 capacity, s.counters.allocated_bytes, bytes),
                     "create the arena with a larger reserve_size");
    if (s.top + bytes > s.buffer.size()) {
      if (auto ok = s.map_to(s.top + bytes, op); !ok) return std::move(ok).error();
    }
    s.top += bytes;
  }
  s.live.emplace(offset, bytes);
  ++s.counters.allocations;
  s.counters.allocated_bytes += bytes;
  return static_cast<void*>(static_cast<unsigned char*>(s.buffer.data()) + offset);
}

status growable_arena::deallocate(void* pointer) {
  auto args = [&] { return fmt::format("pointer={}", pointer); };
  const detail::operation op{"pvmm::growable_arena::deallocate", args};
  if (!state_) return op.fail(errc::already_released, "this growable_arena is empty (released or moved from)");
  auto& s = *state_;
  std::lock_guard<std::mutex> guard(s.lock);
  auto it = s.find(pointer);
  if (it == s.live.end())
    return op.fail(errc::invalid_argument,
                   "the pointer is not an allocation of this arena (freed already, or another's)");
  std::size_t offset = it->first;
  std::size_t bytes = it->second;
  s.live.erase(it);
  --s.counters.allocations;
  s.counters.allocated_bytes -= bytes;
  auto next = s.free.find(offset + bytes);  // coalesce with the free neighbours on both sides
  if (next != s.free.end()) {
    bytes += next->second;
    s.free.erase(next);
  }
  auto prev = s.free.lower_bound(offset);
  if (prev != s.free.begin() && std::prev(prev)->first + std::prev(prev)->second == offset) {
    --prev;
    offset = prev->first;
    bytes += prev->second;
    s.free.erase(prev);
  }
  if (offset + bytes != s.top) {
    s.free.emplace(offset, bytes);
    return {};
  }
  s.top = offset;  // the highest block went: give back the chunks nothing reaches any more
  const std::size_t chunk = s.buffer.chunk_size();
  const std::size_t keep = (s.top + chunk - 1) / chunk * chunk;
  if (keep < s.buffer.size()) return s.map_to(keep, op);
  return {};
}

arena_stats growable_arena::stats() const noexcept {
  if (!state_) return {};
  std::lock_guard<std::mutex> guard(state_->lock);
  return state_->counters;
}

std::size_t growable_arena::size_of(const void* pointer) const noexcept {
  if (!state_) return 0;
  std::lock_guard<std::mutex> guard(state_->lock);
  auto it = state_->find(pointer);
  return it == state_->live.end() ? 0 : it->second;
}

bool growable_arena::contains(const void* pointer) const noexcept {
  if (!state_) return false;
  const auto at = reinterpret_cast<std::uintptr_t>(pointer);
  const auto base = reinterpret_cast<std::uintptr_t>(state_->buffer.data());
  return at >= base && at - base < state_->buffer.capacity();
}

void* growable_arena::base() const noexcept { return state_ ? state_->buffer.data() : nullptr; }
int growable_arena::device() const noexcept { return state_ ? state_->device : -1; }

status growable_arena::release() noexcept {
  const detail::operation op{"pvmm::growable_arena::release"};
  if (!state_) return op.fail(errc::already_released, "this growable_arena is empty (released or moved from)");
  {
    std::lock_guard<std::mutex> guard(state_->lock);
    if (!state_->live.empty())
      return op.fail(errc::busy, fmt::format("{} allocations are still live", state_->live.size()),
                     "deallocate them first");
  }
  state_.reset();
  return {};
}

}  // namespace pvmm
