// Host backend, feature "pool": the suballocator. Freed blocks are indexed by (size, offset) in ordered sets: per
// stream they were freed on, one set of completed frees and one of pending ones, and one set of memory every
// stream may take. An allocation asks each set for its best fit (a lower_bound) and the reuse policy (may_reuse)
// about at most a few candidates per set, so it costs O(streams x log blocks), never a scan of the blocks. Sets
// per freed-on stream rather than one tree or TLSF's size classes: the policy decides per (freed-on stream,
// allocating stream), so the index must keep blocks of different origins apart to answer in one look-up. A set
// whose few best fits are all refused (follow-only ordering that has not reached their frees) falls through to
// new memory: that costs memory, never correctness. Freed neighbours of one origin coalesce once their frees have
// completed (the merged block may be taken by exactly the streams that could take both); the end is lowered past
// freed blocks every stream may take, and by trim past every completed free.
#include <fcntl.h>
#include <linux/falloc.h>

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "core/propagate.hpp"
#include "pool_state.hpp"

namespace pvmm::detail::backend::host {

// The one place the reuse policies are decided: the drivers' measured rules (tools/probes/README.md, pool_reuse,
// CUDA 13.0 and HIP-on-NVIDIA on driver 580), numbered as memory_pool.hpp states them. take() asks with
// `internal` off unless the pool could not grow otherwise (rule 4's unmeasured case, decided for the host).
reuse may_reuse(const reuse_policy& policy, const free_origin& freed, const worker_stream& on) {
  if (!freed.stream) return freed.completed ? reuse::now : reuse::no;  // gone (drained) or fresh: nothing to order
  if (freed.stream.get() == &on) return reuse::now;                    // 5: stream order alone makes it safe
  if (freed.sequence == sequence_unknown) return reuse::no;  // its free is being enqueued: no place to order after
  if (freed.completed && freed.stream->synchronized() >= freed.sequence) return reuse::now;        // 1: seen by a sync
  if (policy.follow && on.ordered_after(freed.stream.get()) >= freed.sequence) return reuse::now;  // 3
  if (policy.opportunistic && freed.completed) return reuse::now;                                  // 2
  if (policy.internal) return freed.completed ? reuse::now : reuse::after_wait;  // 4: only when the pool is full
  return reuse::no;
}

namespace {
bool same_stream(const std::weak_ptr<worker_stream>& a, const std::weak_ptr<worker_stream>& b) {
  return !a.owner_before(b) && !b.owner_before(a);
}
}  // namespace

status host_pool::commit(std::size_t offset, std::size_t size) {
  for (std::size_t c = offset / pool_chunk; c * pool_chunk < offset + size; ++c) {
    if (committed[c]) continue;
    if (::fallocate(fd, 0, static_cast<off_t>(c * pool_chunk), static_cast<off_t>(chunk_bytes(c))) != 0)
      return errno_error(errc::out_of_memory, "fallocate", errno, "committing a pool chunk");
    committed[c] = true;
    reserved_bytes += chunk_bytes(c);
  }
  reserved_high = std::max(reserved_high, reserved());
  return {};
}

size_index& host_pool::index_of(const pool_block& b) {
  if (b.any_stream) return any_stream;
  auto& frees = by_stream[b.freed_on];
  return b.what == pool_block::state::free ? frees.done : frees.pending;
}

void host_pool::index(std::size_t offset, const pool_block& b) { index_of(b).emplace(b.size, offset); }

void host_pool::unindex(std::size_t offset, const pool_block& b) {
  if (b.any_stream) {
    any_stream.erase({b.size, offset});
    return;
  }
  auto g = by_stream.find(b.freed_on);
  if (g == by_stream.end()) return;
  (b.what == pool_block::state::free ? g->second.done : g->second.pending).erase({b.size, offset});
  if (g->second.done.empty() && g->second.pending.empty()) by_stream.erase(g);
}

// Neighbours freed on one stream merge even while pending: that stream completes its frees in order, so the
// merged block is done when the later free is (it keeps that free's ticket and place).
bool host_pool::mergeable(const pool_block& a, const pool_block& b) const {
  if (a.what == pool_block::state::live || b.what == pool_block::state::live) return false;
  if (a.any_stream || b.any_stream) return a.any_stream && b.any_stream;
  return a.free_sequence != sequence_unknown && b.free_sequence != sequence_unknown &&
         same_stream(a.freed_on, b.freed_on);
}

void host_pool::coalesce(std::size_t from, std::size_t to) {
  auto it = blocks.upper_bound(from);
  for (int back = 0; back < 2 && it != blocks.begin(); ++back) --it;  // the block holding `from`, and the one before
  while (it != blocks.end() && it->first <= to) {
    auto next = std::next(it);
    if (next == blocks.end()) break;
    if (!mergeable(it->second, next->second)) {
      it = next;
      continue;
    }
    unindex(it->first, it->second);
    unindex(next->first, next->second);
    pool_block& low = it->second;
    const pool_block& high = next->second;
    if (high.free_sequence > low.free_sequence) {
      low.free_sequence = high.free_sequence;
      low.ticket = high.ticket;
    }
    if (high.what == pool_block::state::pending) low.what = pool_block::state::pending;
    low.size += high.size;
    blocks.erase(next);
    if (low.what == pool_block::state::pending) {  // its free's pieces now reach this far
      auto& span = spans[low.ticket];
      span.from = std::min(span.from, it->first);
      span.to = std::max(span.to, it->first + low.size);
    }
    index(it->first, it->second);
  }
}

void host_pool::lower_end(bool any_completed) {
  while (!blocks.empty()) {
    auto top = std::prev(blocks.end());
    const pool_block& b = top->second;
    if (b.what != pool_block::state::free || !(b.any_stream || any_completed)) return;
    unindex(top->first, b);
    end = top->first;
    blocks.erase(top);
  }
}

void host_pool::forget_gone_streams() {
  std::vector<std::size_t> moved;
  for (auto g = by_stream.begin(); g != by_stream.end();) {
    if (!g->first.expired()) {
      ++g;
      continue;
    }
    // Its destructor drained its queue: its completed frees are free for every stream. Pending ones (their task
    // is running in that drain now) follow when it completes.
    for (auto [size, offset] : g->second.done) {
      pool_block& b = blocks.find(offset)->second;
      b.any_stream = true;
      b.freed_on.reset();
      any_stream.emplace(size, offset);
      moved.push_back(offset);
    }
    g->second.done.clear();
    g = g->second.pending.empty() ? by_stream.erase(g) : std::next(g);
  }
  for (std::size_t offset : moved) coalesce(offset, offset);
  if (!moved.empty()) lower_end(false);
}

result<host_pool::placement> host_pool::take(std::size_t need, std::size_t requested,
                                             const std::shared_ptr<worker_stream>& on,
                                             std::vector<std::shared_ptr<worker_stream>>& held) {
  forget_gone_streams();
  struct candidate {
    std::size_t offset, size;
    reuse how;
    const std::shared_ptr<worker_stream>* stream;
    std::uint64_t sequence;
  };
  std::optional<candidate> best;
  auto better = [&](const candidate& a, const candidate& b) {
    if ((a.how == reuse::now) != (b.how == reuse::now)) return a.how == reuse::now;
    if (a.size != b.size) return a.size < b.size;
    return a.stream->get() == on.get() && b.stream->get() != on.get();  // its own frees keep a stream's data warm
  };
  auto consider = [&](const size_index& frees, const std::shared_ptr<worker_stream>& stream, const reuse_policy& p) {
    int asked = 0;
    for (auto it = frees.lower_bound({need, 0}); it != frees.end() && asked < 4; ++it, ++asked) {
      const pool_block& b = blocks.find(it->second)->second;
      const reuse how = may_reuse(p, {stream, b.free_sequence, b.what == pool_block::state::free}, *on);
      if (how == reuse::no) continue;
      const candidate c{it->second, it->first, how, &stream, b.free_sequence};
      if (!best || better(c, *best)) best = c;
      return;
    }
  };
  static const std::shared_ptr<worker_stream> no_stream;
  // Locked once for both passes: candidates point into `held`, so it never reallocates after this.
  held.reserve(held.size() + by_stream.size() + 1);
  const std::size_t first = held.size();
  for (auto& entry : by_stream) held.push_back(entry.first.lock());  // gone: only pending frees, nobody's yet
  auto top = blocks.empty() ? blocks.end() : std::prev(blocks.end());
  const bool top_freed = top != blocks.end() && top->second.what != pool_block::state::live;
  if (top_freed) held.push_back(top->second.any_stream ? nullptr : top->second.freed_on.lock());
  bool grow = false;
  auto search = [&](const reuse_policy& p) {
    consider(any_stream, no_stream, p);
    std::size_t i = first;
    for (auto& entry : by_stream) {
      consider(entry.second.done, held[i], p);
      consider(entry.second.pending, held[i], p);
      ++i;
    }
    // No freed block fits: grow the top block when it is freed memory `on` may take, else take new memory.
    if (best || !top_freed) return;
    const pool_block& b = top->second;
    if (b.size < need && need - b.size > capacity - end) return;
    const reuse how = may_reuse(p, {held.back(), b.free_sequence, b.what == pool_block::state::free}, *on);
    if (how == reuse::no) return;
    best = candidate{top->first, b.size, how, &held.back(), b.free_sequence};
    grow = b.size < need;
  };
  reuse_policy first_pass = policy;
  first_pass.internal = false;  // the drivers prefer new memory to a wait while the pool can grow (rule 4)
  search(first_pass);
  const bool fits_new = need <= capacity && end <= capacity - need;
  if (!best && !fits_new && policy.internal) search(policy);
  if (!best && (need > capacity || end > capacity - need))
    return make_error(errc::out_of_memory,
                      fmt::format("the pool's maximum size {:#x} would be exceeded ({:#x} in blocks, {:#x} asked)",
                                  capacity, end, need),
                      "free earlier allocations (and synchronize), or create the pool with a larger max_size");
  const std::size_t offset = best ? best->offset : end;
  PVMM_TRY(commit(offset, need));
  placement out;
  out.offset = offset;
  pool_block* made;
  if (best) {
    made = &blocks.find(offset)->second;
    unindex(offset, *made);
    if (made->size > need) {  // split: the rest stays freed as it was
      pool_block rest = *made;
      rest.size = made->size - need;
      index(blocks.emplace(offset + need, rest).first->first, rest);
    }
    if (best->how == reuse::after_wait) {
      out.wait_on = *best->stream;
      out.wait_for = best->sequence;
    }
    if (grow) end = offset + need;
  } else {
    made = &blocks[offset];
    end = offset + need;
  }
  made->size = need;
  made->what = pool_block::state::live;
  made->any_stream = false;
  made->freed_on.reset();
  made->ticket = 0;
  made->allocated_on = on;
  made->allocated_after = sequence_unknown;  // set once the allocation is enqueued
  made->generation = next_generation;
  next_generation += 2;
  made->requested = requested;
  used += need;
  used_high = std::max(used_high, used);
  auto& u = unit(offset);
  u.size.store(requested);
  u.generation.store(made->generation);  // after the size: an importer reading this generation sees that size
  return out;
}

std::uint64_t host_pool::release(std::size_t offset, const std::shared_ptr<worker_stream>& on) {
  pool_block& b = blocks.find(offset)->second;
  unit(offset).generation.store(b.generation + 1);  // even: an import from now on is stale
  b.what = pool_block::state::pending;
  b.allocated_on.reset();
  b.any_stream = false;
  b.freed_on = on;
  b.free_sequence = sequence_unknown;
  b.ticket = ++next_ticket;
  spans[b.ticket] = free_span{offset, offset + b.size};
  index(offset, b);
  return b.ticket;
}

std::map<std::size_t, pool_block>::iterator host_pool::block_holding(std::size_t offset) {
  auto it = blocks.upper_bound(offset);
  if (it != blocks.begin()) --it;
  return it;
}

std::optional<host_pool::free_span> host_pool::settle(std::uint64_t ticket, bool free_span::*half) {
  auto found = spans.find(ticket);
  if (found == spans.end()) return std::nullopt;
  free_span span = found->second;
  span.*half = true;
  if (span.ran && span.placed)
    spans.erase(found);
  else
    found->second = span;
  return span;
}

void host_pool::enqueued(std::uint64_t ticket, std::uint64_t sequence) {
  const auto span = settle(ticket, &free_span::placed);
  if (!span) return;
  for (auto it = block_holding(span->from); it != blocks.end() && it->first < span->to; ++it)
    if (it->second.what != pool_block::state::live && it->second.ticket == ticket &&
        it->second.free_sequence == sequence_unknown)
      it->second.free_sequence = sequence;
  coalesce(span->from, span->to);
  lower_end(false);
}

void host_pool::completed(std::size_t size, std::uint64_t ticket) {
  used -= size;
  const auto span = settle(ticket, &free_span::ran);  // enqueued() may still give its pieces their place
  if (!span) return;
  // From the block holding the span's start: a merged piece may start below it.
  for (auto it = block_holding(span->from); it != blocks.end() && it->first < span->to; ++it) {
    pool_block& b = it->second;
    if (b.what != pool_block::state::pending || b.ticket != ticket) continue;  // reused meanwhile
    unindex(it->first, b);
    b.what = pool_block::state::free;
    if (!b.any_stream && b.freed_on.expired()) {  // its stream is being torn down: this ran in its drain
      b.any_stream = true;
      b.freed_on.reset();
    }
    index(it->first, b);
  }
  coalesce(span->from, span->to);
  lower_end(false);
}

void host_pool::trim(std::uint64_t keep, trim_rule rule) {
  forget_gone_streams();
  lower_end(true);  // memory given back is fresh: whoever freed it last no longer matters
  for (std::size_t c = committed.size(); c-- > 0 && reserved() > keep;) {
    if (!committed[c] || (rule == trim_rule::at_least_keep && reserved() - chunk_bytes(c) < keep)) continue;
    const std::size_t lo = c * pool_chunk, hi = lo + chunk_bytes(c);
    bool busy = false;
    for (auto it = block_holding(lo); it != blocks.end() && it->first < hi; ++it)
      if (it->first + it->second.size > lo && it->second.what != pool_block::state::free) {
        busy = true;
        break;
      }
    if (busy) continue;
    if (::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(lo),
                    static_cast<off_t>(hi - lo)) != 0)
      continue;
    committed[c] = false;
    reserved_bytes -= hi - lo;
  }
}

}  // namespace pvmm::detail::backend::host
