// pvmm-bench traces: the allocation traces (trace_gen.cpp: transformer, lognormal; trace_gen_jobs.cpp: mixture of
// experts, activation recomputation, inference KV cache), generated from a seed, nothing downloaded. The same seed
// and scale give the same trace on every platform for the newer families (their random numbers come from
// std::mt19937_64 through the helpers below, not from the standard library's distributions).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace bench::tracegen {

struct op {
  bool alloc = true;
  int stream = 0;        // 0: compute, 1: the second stream
  std::uint32_t id = 0;  // the buffer
  std::size_t size = 0;  // alloc only
};

struct trace {
  std::string name;
  std::vector<op> ops;
  std::vector<std::size_t> checkpoints;  // op indices after which buffers are checked
  std::uint32_t ids = 0;
  std::uint64_t peak_live = 0;
};

/// Builds a trace, tracking live bytes; sizes are scaled by `scale` and rounded down to 512 bytes (at least 512).
struct builder {
  builder(std::string name, double size_scale) : scale(size_scale) { t.name = std::move(name); }
  trace t;
  double scale = 1;
  std::vector<std::size_t> sizes;
  std::uint64_t live = 0;
  std::size_t scaled(double bytes) const;
  /// A buffer of `bytes` (scaled) on `stream`.
  std::uint32_t alloc(double bytes, int stream = 0);
  void free(std::uint32_t id, int stream = 0);
  void free_all(std::vector<std::uint32_t>& ids, int stream = 0);
  /// Buffers are checked after the last op so far (once per op index; none before the first op).
  void checkpoint() {
    if (!t.ops.empty() && (t.checkpoints.empty() || t.checkpoints.back() != t.ops.size()))
      t.checkpoints.push_back(t.ops.size());
  }
  /// `ids` freed (on stream 0), then a checkpoint: a training step's end, a trace's.
  void free_and_check(std::vector<std::uint32_t>& ids) {
    free_all(ids);
    checkpoint();
  }
  /// The trace, once `ids` (what is still live) are freed and checked.
  trace finish(std::vector<std::uint32_t>& ids) {
    free_and_check(ids);
    return t;
  }
};

/// Portable random numbers from a std::mt19937_64 (the same sequence under every standard library).
inline double uniform01(std::mt19937_64& rng) { return double(rng() >> 11) * 0x1p-53; }
inline double normal(std::mt19937_64& rng) {  // Box-Muller
  const double u = 1.0 - uniform01(rng), v = uniform01(rng);
  return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v);
}
inline double lognormal(std::mt19937_64& rng, double median, double sigma) {
  return median * std::exp(sigma * normal(rng));
}
/// An integer in [lo, hi].
inline std::int64_t uniform_int(std::mt19937_64& rng, std::int64_t lo, std::int64_t hi) {
  return lo + static_cast<std::int64_t>(uniform01(rng) * double(hi - lo + 1));
}

/// A decoder stack's training step; "fsdp": weights gathered on the second stream, gradients freed there.
trace transformer(bool fsdp, std::uint32_t seed, double scale);
/// Lognormal sizes freed in random order; "cross": each freed on a random one of two streams.
trace lognormal(bool cross, std::uint32_t seed, double scale);
/// A mixture-of-experts training step: per layer and step, token counts per expert drawn unevenly.
trace moe(std::uint32_t seed, double scale);
/// Activation recomputation: forward keeps only layer inputs; backward recomputes each layer in a burst.
trace recompute(std::uint32_t seed, double scale);
/// An inference server's KV caches growing per decoded token and freed per finished request, load rising and falling.
trace kv_cache(std::uint32_t seed, double scale);

/// Fragmentation as GMLake reports it: the bytes an allocator reserves beyond the live bytes at the peak, and that
/// gap as a fraction of live (peak reserved / peak live - 1); a side that reserved less than live gives 0.
struct fragmentation {
  std::uint64_t bytes = 0;
  double of_live = 0;
};
inline fragmentation fragmentation_at_peak(std::uint64_t peak_reserved, std::uint64_t peak_live) {
  fragmentation f;
  f.bytes = peak_reserved > peak_live ? peak_reserved - peak_live : 0;
  f.of_live = peak_live ? double(f.bytes) / double(peak_live) : 0;
  return f;
}

/// Every trace the bench replays, in its order, with its seeds.
std::vector<trace> all(double scale);

/// What is wrong with `t` (an id allocated twice, freed before its allocation or twice, never freed, a size under
/// 512 bytes, a checkpoint out of order, peak_live not what the ops give), or empty.
std::string check(const trace& t);

}  // namespace bench::tracegen
