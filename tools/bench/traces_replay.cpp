// pvmm-bench traces: the replay of every trace (trace_gen.hpp: generated from seeds) through every side (traces.cpp):
// only the allocate and free calls are timed; every buffer gets a stamp written at both ends after its allocation and
// read back before its free, checked at checkpoints (both streams synchronized), outside the timed calls. Families:
//   transformer  a training step of a decoder stack with a variable token count per step (weights, saved
//                activations, temporaries, weight gradients); "fsdp" gathers each layer's weights on a second
//                stream and frees them on the compute stream, and frees gradients on the second stream
//   lognormal    sizes lognormal in [512 B, 256 MiB], freed in random order; "cross" frees each on a random one
//                of two streams
//   moe          a mixture-of-experts step: expert buffers sized by per-layer, per-step token counts; dispatched
//                tokens allocated on the second stream, freed on the compute stream
//   recompute    activation recomputation: bursts of large short-lived blocks (recomputed activations, attention
//                scores) per layer in the backward pass, the batch changing per step
//   kv cache     inference with continuous batching: KV caches reallocated larger as requests decode, freed as they
//                finish, arrivals in two waves (the cache grows and shrinks); per-step logits sized by the batch
// --trace-scale=F scales every size (CI runs 0.004 on the host backend); --trace-only=TEXT replays only the traces
// whose name holds TEXT.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <pvmm/pvmm.hpp>

#include "bench.hpp"
#include "trace_gen.hpp"
#include "traces.hpp"

namespace bench {

double trace_scale = 1.0;
int trace_rounds = 5;
std::string trace_only;
int trace_slack = -1;
int trace_chunk_mib = 0;

namespace {

constexpr std::size_t stamp_bytes = 16;
using tracegen::op;
using tracegen::trace;

struct replay_result {
  std::vector<double> pair_s;  // alloc + free time per buffer
  double mean_s = 0;
};

/// Replays `t` on `s`, timing only the calls; stamps and checks every buffer outside them.
replay_result replay(const trace& t, side& s, pvmm::stream* streams, pvmm::event& order) {
  std::vector<void*> where(t.ids, nullptr);
  std::vector<std::size_t> size(t.ids, 0);
  std::vector<int> home(t.ids, 0);
  std::vector<double> alloc_s(t.ids, 0), pair(t.ids, 0);
  std::vector<std::array<std::uint64_t, 4>> seen(t.ids);  // the stamps read back: head, tail
  std::vector<std::uint32_t> to_check;
  std::size_t next_checkpoint = 0;
  for (std::size_t i = 0; i < t.ops.size(); ++i) {
    const op& o = t.ops[i];
    auto& st = streams[o.stream];
    if (o.alloc) {
      auto t0 = clock_type::now();
      void* p = s.alloc(o.size, st);
      alloc_s[o.id] = seconds_since(t0);
      check(p != nullptr, "allocate");
      where[o.id] = p, size[o.id] = o.size, home[o.id] = o.stream;
      const std::uint64_t stamp[2] = {o.id + 1, o.size};
      check(st.copy_async(p, stamp, stamp_bytes).has_value(), "stamp head");
      check(st.copy_async(static_cast<char*>(p) + o.size - stamp_bytes, stamp, stamp_bytes).has_value(), "stamp tail");
    } else {
      void* p = where[o.id];
      if (home[o.id] != o.stream) {  // the freeing stream is ordered after the buffer's use (as record_stream)
        check(order.record(streams[home[o.id]]).has_value(), "event record");
        check(st.wait(order).has_value(), "stream wait");
      }
      check(st.copy_async(seen[o.id].data(), p, stamp_bytes).has_value(), "read head");
      check(st.copy_async(seen[o.id].data() + 2, static_cast<char*>(p) + size[o.id] - stamp_bytes, stamp_bytes)
                .has_value(),
            "read tail");
      auto t0 = clock_type::now();
      s.free(p, st);
      pair[o.id] = alloc_s[o.id] + seconds_since(t0);
      to_check.push_back(o.id);
    }
    if (next_checkpoint < t.checkpoints.size() && t.checkpoints[next_checkpoint] == i + 1) {
      ++next_checkpoint;
      check(streams[0].synchronize().has_value() && streams[1].synchronize().has_value(), "synchronize");
      for (auto id : to_check) {
        const auto& v = seen[id];
        if (v[0] != id + 1 || v[1] != size[id] || v[2] != id + 1 || v[3] != size[id]) {
          std::fprintf(stderr, "pvmm-bench traces: %s: buffer %u (%zu bytes) lost its stamps\n", s.name.c_str(), id,
                       size[id]);
          std::exit(1);
        }
      }
      to_check.clear();
    }
  }
  replay_result r;
  r.pair_s = std::move(pair);
  double sum = 0;
  for (double x : r.pair_s) sum += x;
  r.mean_s = sum / static_cast<double>(std::max<std::size_t>(1, r.pair_s.size()));
  return r;
}

}  // namespace

void traces() {
  fmt::print(
      "\ntraces: allocation traces replayed per allocator, {} rounds, sides in rotating order; only allocate and free "
      "are timed (stamps written and checked outside); scale {}; caching slack_percent {}, chunk {} (target: caching "
      "faster than PyTorch and RMM's pool per alloc+free, peak reserved <= 1.10x peak live)\n",
      trace_rounds, trace_scale, trace_slack >= 0 ? unsigned(trace_slack) : pvmm::caching_options{}.slack_percent,
      [] {  // what the caching side's allocator will use: the flag's size or the library's default
        pvmm::caching_options o;
        o.chunk_size = std::size_t(trace_chunk_mib) << 20;
        auto a = pvmm::caching_allocator::create(o);
        return a ? fmt::format("{} MiB", a->chunk_size() >> 20) : std::string("unavailable");
      }());
  pvmm::stream streams[2] = {pvmm::stream::create(0).value(), pvmm::stream::create(0).value()};
  auto order = pvmm::event::create(0).value();
  const std::vector<trace> traces = tracegen::all(trace_scale);
  for (const trace& t : traces) {
    if (t.name.find(trace_only) == std::string::npos) continue;
    // Fresh sides per trace, so each peak belongs to one trace.
    auto sides = make_sides(streams);
    std::size_t frees = 0;
    for (auto& o : t.ops) frees += !o.alloc;
    fmt::print("\n  {}: {} allocations, peak live {:.3f} GiB\n", t.name, frees, double(t.peak_live) / (1 << 30));
    // resv-live and frag: fragmentation as GMLake reports it, the bytes held beyond the live ones at the peak (peak
    // reserved - peak live), and that as a fraction of live.
    fmt::print("  {:<44} {:>9} {:>9} {:>9} {:>13} {:>9} {:>13} {:>6}  {}\n", "side", "p50 us", "p99 us", "mean us",
               "peak resv GiB", "resv/live", "resv-live MiB", "frag", "caching vs side: ratio [IQR]");
    std::vector<std::vector<double>> means(sides.size());
    std::vector<std::vector<double>> pairs(sides.size());
    for (int r = 0; r < trace_rounds + 1; ++r)
      for (std::size_t k = 0; k < sides.size(); ++k) {
        if (r == 1 && k == 0)
          for (auto& sd : sides) sd.start_counting();
        const std::size_t i = (k + static_cast<std::size_t>(r)) % sides.size();
        auto res = replay(t, sides[i], streams, order);
        if (r == 0) continue;  // warm-up round
        means[i].push_back(res.mean_s);
        pairs[i].insert(pairs[i].end(), res.pair_s.begin(), res.pair_s.end());
      }
    std::size_t caching = 0;
    for (std::size_t i = 0; i < sides.size(); ++i)
      if (sides[i].name == "pvmm caching_allocator") caching = i;
    const double pairs_timed = double(frees) * trace_rounds;
    for (std::size_t i = 0; i < sides.size(); ++i) {
      const std::uint64_t peak = sides[i].peak_reserved();
      const double resv = double(peak);
      std::string vs = "-";
      if (i != caching) {
        auto c = compare(means[caching], means[i]);
        vs = fmt::format("{:.3f}x [{:.3f}-{:.3f}]{}", c.ratio, c.q1, c.q3, c.within_noise() ? " within noise" : "");
      }
      const auto frag = tracegen::fragmentation_at_peak(peak, t.peak_live);
      fmt::print("  {:<44} {:>9.3f} {:>9.3f} {:>9.3f} {:>13.3f} {:>9.3f} {:>13.1f} {:>5.1f}%  {}\n", sides[i].name,
                 quantile(pairs[i], 0.5) * 1e6, quantile(pairs[i], 0.99) * 1e6, median(means[i]) * 1e6,
                 resv / (1 << 30), resv / double(t.peak_live), double(frag.bytes) / (1 << 20), frag.of_live * 100, vs);
      if (auto calls = sides[i].calls(pairs_timed); !calls.empty()) fmt::print("    {}\n", calls);
    }
  }
  check(streams[0].synchronize().has_value() && streams[1].synchronize().has_value(), "synchronize");
  fmt::print("\n  traces: every buffer's stamps read back as written, on every side\n");
}

}  // namespace bench
