// The caching allocator's streams: marks, fences, and what the host and the device know of them.
#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "alloc/caching_state.hpp"
#include "core/checked_math.hpp"

namespace pvmm {

auto caching_allocator::state::record_fence(std::uint32_t p, const detail::operation& op) -> result<fence*> {
  auto& ps = streams[p];
  ++st.event_records;
  auto ev = events.record(options.device, ps.s, op, &st.event_record_ns);
  if (!ev) return std::move(ev).error();
  ps.fences.push_back(fence{std::move(*ev), ps.mark});
  ps.fenced = ps.mark;
  return &ps.fences.back();
}

auto caching_allocator::state::poll(std::uint32_t p, std::uint64_t want) -> void {
  auto& ps = streams[p];
  if (ps.polled != epoch) {
    ps.polled = epoch;
    while (!ps.fences.empty()) {
      ++st.event_queries;
      auto q = detail::caching::timed(st.event_query_ns, [&] { return ps.fences.front().ev.query(); });
      if (!q || !*q) break;
      ps.done = std::max(ps.done, ps.fences.front().mark);
      events.give_back(std::move(ps.fences.front().ev));
      ps.fences.pop_front();
    }
  }
  if (want > ps.done && want > ps.fenced && ps.stream_polled != epoch) {
    ps.stream_polled = epoch;
    ++st.event_queries;
    auto q = detail::caching::timed(st.event_query_ns, [&] { return ps.s.query(); });
    if (q && *q) ps.done = ps.mark;
  }
}

auto caching_allocator::state::fence_cross_frees(const detail::operation& op) -> void {
  for (std::uint32_t p = 0; p < streams.size(); ++p)
    if (streams[p].cross > std::max(streams[p].fenced, streams[p].done)) (void)record_fence(p, op);  // done: synced
}

auto caching_allocator::state::seen_done(const gate& g, bool fence_if_busy) -> bool {
  auto& ps = streams[g.stream];
  if (g.mark <= ps.done) return true;
  poll(g.stream, g.mark);
  if (g.mark <= ps.done) return true;
  if (fence_if_busy && ps.fenced < g.mark) {  // a failure leaves it unfenced: the block waits
    const detail::operation op{"pvmm::caching_allocator::allocate"};
    (void)record_fence(g.stream, op);
  }
  return false;
}

auto caching_allocator::state::wait_for(const block& b, std::uint32_t c, const detail::operation& op) -> status {
  for (const gate& g : b.gates) {
    if (g.stream == no_stream || g.stream == c || g.mark <= streams[c].waited[g.stream]) continue;
    if (g.mark <= streams[g.stream].done) continue;
    auto& ps = streams[g.stream];
    if (ps.fenced < g.mark)
      if (auto f = record_fence(g.stream, op); !f) return std::move(f).error();
    const fence* f = nullptr;
    for (const auto& x : ps.fences)
      if (x.mark >= g.mark) {
        f = &x;
        break;
      }
    ++st.device_waits;
    if (auto ok = detail::caching::timed(st.device_wait_ns, [&] { return streams[c].s.wait(f->ev); }); !ok)
      return op.wrap(std::move(ok).error());
    streams[c].waited[g.stream] = f->mark;
  }
  ++st.waits;
  return {};
}

auto caching_allocator::state::quiet(const block& b) -> bool {
  for (const gate& g : b.gates)
    if (g.stream != no_stream && !seen_done(g, true)) return false;
  return true;
}
}  // namespace pvmm
