// The caching allocator's free lists: best fit, split, merge; allocate and deallocate.
#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "alloc/caching_state.hpp"
#include "core/checked_math.hpp"
#include "stream/stream_checks.hpp"

namespace pvmm {

auto caching_allocator::state::merge_gates(gate* into, const gate* from, bool apply) -> bool {
  gate out[2] = {into[0], into[1]};
  for (int k = 0; k < 2; ++k) {
    const gate& g = from[k];
    if (g.stream == no_stream) continue;
    gate* slot = nullptr;
    for (gate& o : out)
      if (o.stream == g.stream) slot = &o;
    if (!slot)
      for (gate& o : out)
        if (o.stream == no_stream && !slot) slot = &o;
    if (!slot) return false;
    slot->stream = g.stream;
    slot->mark = std::max(slot->mark, g.mark);
  }
  if (apply) into[0] = out[0], into[1] = out[1];
  return true;
}

auto caching_allocator::state::cache(block* b) -> void {
  if (mergeable(b, b->prev)) {
    block* p = b->prev;
    streams[p->home].free.erase(p);  // its size changes
    absorb(p, b);
    b = p;
  }
  if (mergeable(b, b->next)) absorb(b, b->next);
  streams[b->home].free.insert(b);
}

auto caching_allocator::state::absorb(block* into, block* gone) -> void {
  streams[gone->home].free.erase(gone);
  merge_gates(into->gates, gone->gates, true);
  into->size += gone->size;
  into->next = gone->next;
  if (gone->next) gone->next->prev = into;
  drop_block(gone);
}

auto caching_allocator::state::best_fit(std::uint32_t p, std::uint32_t c, std::size_t bytes, block** pending)
    -> block* {
  auto& list = streams[p].free;
  block key;
  key.size = bytes;
  int gated = 0;  // blocks passed over for a pending gate: bounded, so a long gated list costs no long scan
  for (auto it = list.lower_bound(&key); it != list.end() && gated < max_gated_scan; ++it, ++gated) {
    if (usable(**it, c)) return *it;
    if (!*pending || (*it)->size < (*pending)->size) *pending = *it;
  }
  return nullptr;
}

auto caching_allocator::state::take(block* b, std::uint32_t c, std::size_t bytes) -> block* {
  streams[b->home].free.erase(b);
  if (b->size - bytes >= min_block) {
    block* rest = new_block();
    *rest = *b;
    rest->ptr = b->ptr + bytes;
    rest->size = b->size - bytes;
    rest->prev = b;
    if (rest->next) rest->next->prev = rest;
    b->next = rest;
    b->size = bytes;
    streams[rest->home].free.insert(rest);
  }
  b->home = c;
  b->gates[0] = b->gates[1] = gate{};
  return b;
}

auto caching_allocator::state::find_or_make(std::size_t bytes, std::uint32_t c, const detail::operation& op)
    -> result<block*> {
  ++epoch;
  fence_cross_frees(op);
  block* pending = nullptr;
  block* b = best_fit(c, c, bytes, &pending);  // the hot path: no driver call unless a gate is foreign
  for (std::uint32_t p = 0; !b && p < streams.size(); ++p)
    if (p != c) b = best_fit(p, c, bytes, &pending);
  if (b) {
    ++st.cache_hits;
    return take(b, c, bytes);
  }
  if (pending && options.wait_for_pending_frees) {  // memory first: wait on the device rather than reserve more
    if (auto ok = wait_for(*pending, c, op); !ok) return std::move(ok).error();
    ++st.cache_hits;
    return take(pending, c, bytes);
  }
  auto whole = detail::checked_round_up(bytes, chunk);
  if (!whole) return op.fail(errc::out_of_memory, "the size rounded up to whole chunks exceeds the address space");
  auto made = stitch(bytes, *whole / chunk, st.live + bytes, c, op);
  if (!made) return std::move(made).error();
  return take_fresh(*made, c, bytes);
}

auto caching_allocator::state::rehome_all() -> void {
  std::vector<block*> all;
  for (auto& ps : streams) {
    all.insert(all.end(), ps.free.begin(), ps.free.end());
    ps.free.clear();
  }
  for (block* b : all) {
    b->home = 0;
    b->gates[0] = b->gates[1] = gate{};
  }
  for (block* b : all)
    if (b->reg) {                // null: merged into a neighbour already
      streams[0].free.erase(b);  // it may be there already, as the survivor of a merge: sizes change below
      cache(b);
    }
}

auto caching_allocator::state::cached_blocks() const -> std::uint64_t {
  std::uint64_t n = 0;
  for (auto& ps : streams) n += ps.free.size();
  return n;
}
result<void*> caching_allocator::allocate(std::size_t size, stream_ref on) {
  auto args = [&] { return fmt::format("size={:#x}, stream={:#x}", size, on.native_handle().value); };
  const detail::operation op{"pvmm::caching_allocator::allocate", args};
  if (!state_) return detail::shell::empty_owner(op, "caching_allocator");
  if (size == 0) return op.fail(errc::invalid_size, "size is 0");
  auto& s = *state_;
  if (auto ok = detail::shell::check_stream_of(on, s.options.device, op, "allocator"); !ok)
    return std::move(ok).error();
  if (size > static_cast<std::size_t>(-1) - detail::caching::min_block)
    return op.fail(errc::out_of_memory, "the size rounded up to 512 bytes exceeds the address space");
  const std::size_t bytes = detail::caching::round_size(size);
  std::lock_guard<std::mutex> hold(s.lock);
  const std::uint32_t c = s.index_of(on);
  auto b = s.find_or_make(bytes, c, op);
  if (!b && b.code() == errc::out_of_memory) {
    // Pressure: wait for every pending free, give the whole cache back and try once more.
    ++s.st.pressure_retries;
    if (auto ok = s.give_back_everything(&op); !ok) return std::move(ok).error();
    b = s.find_or_make(bytes, c, op);
  }
  if (!b) return std::move(b).error();
  return s.hand_out(**b, size)->ptr;
}

status caching_allocator::deallocate(void* pointer, stream_ref on) {
  auto args = [&] { return fmt::format("pointer={}, stream={:#x}", pointer, on.native_handle().value); };
  const detail::operation op{"pvmm::caching_allocator::deallocate", args};
  if (!state_) return detail::shell::empty_owner(op, "caching_allocator");
  auto& s = *state_;
  if (auto ok = detail::shell::check_stream_of(on, s.options.device, op, "allocator"); !ok) return ok;
  std::lock_guard<std::mutex> hold(s.lock);
  auto it = s.live.find(pointer);
  if (it == s.live.end())
    return op.fail(errc::invalid_argument,
                   "the pointer was not returned by this allocator's allocate, or was already given back");
  auto& b = *it->second;
  const std::uint32_t freed_on = s.index_of(on);
  detail::caching::gate cross;
  if (freed_on != b.home) {  // record_stream semantics, the event recorded at the next allocation (coalesced)
    auto& fs = s.streams[freed_on];
    fs.cross = ++fs.mark;
    cross = {freed_on, fs.mark};
  }
  b.gates[0] = {b.home, ++s.streams[b.home].mark};
  b.gates[1] = cross;
  b.live = false;
  detail::observe::nvtx::drop_region(b.reg->nvtx.get(), b.ptr, b.requested);
  if (detail::observe::recording())  // completed for the caller; its reuse elsewhere still waits for its gates
    for (auto a : {detail::observe::action::free_requested, detail::observe::action::free_completed})
      detail::observe::record_slow(a, b.ptr, b.requested, s.options.device, on.native_handle().value);
  s.live.erase(it);
  --s.st.live_blocks;
  s.st.live -= b.requested;
  s.cache(&b);
  return {};
}

}  // namespace pvmm
