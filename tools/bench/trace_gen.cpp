// pvmm-bench traces: the builder, the first two families (transformer, lognormal: their random numbers still come from
// the standard library's distributions, so that they stay the traces measured before), the list the bench replays,
// and the check of a trace's shape. The newer families are in trace_gen_jobs.cpp.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "trace_gen.hpp"

namespace bench::tracegen {

std::size_t builder::scaled(double bytes) const {
  return std::max<std::size_t>(512, static_cast<std::size_t>(bytes * scale) / 512 * 512);
}

std::uint32_t builder::alloc(double bytes, int stream) {
  const std::size_t size = scaled(bytes);
  const std::uint32_t id = t.ids++;
  sizes.push_back(size);
  t.ops.push_back({true, stream, id, size});
  live += size;
  t.peak_live = std::max(t.peak_live, live);
  return id;
}

void builder::free(std::uint32_t id, int stream) {
  t.ops.push_back({false, stream, id, 0});
  live -= sizes[id];
}

void builder::free_all(std::vector<std::uint32_t>& ids, int stream) {
  for (auto id : ids) free(id, stream);
  ids.clear();
}

/// A decoder stack, bf16: per layer qkv (3h^2), out (h^2), fc1 (4h^2), fc2 (4h^2) weights; saved activations
/// 13 T h; an attention workspace per layer; gradients of the same shapes. 8 steps, T uniform in [T/2, T].
trace transformer(bool fsdp, std::uint32_t seed, double scale) {
  builder b(fsdp ? "transformer, fsdp cross-stream frees" : "transformer", scale);
  std::mt19937_64 rng(seed);
  const double h = 2048, bytes = 2;
  const int layers = 18, steps = 8, t_max = 4096, shards = 8;
  const double weight_parts[] = {3, 1, 4, 4};
  const double act_parts[] = {1, 3, 1, 4, 4};  // ln input, qkv, attention out, fc1 out, gelu out
  std::vector<std::uint32_t> weights;
  for (int l = 0; l < layers; ++l)
    for (double w : weight_parts) weights.push_back(b.alloc(w * h * h * bytes / (fsdp ? shards : 1)));
  for (int step = 0; step < steps; ++step) {
    const double tokens = std::round((0.5 + 0.5 * std::uniform_real_distribution<double>(0, 1)(rng)) * t_max / 64) * 64;
    std::vector<std::vector<std::uint32_t>> saved(layers);
    auto gather = [&] {  // fsdp: the layer's full weights on the second stream, freed on compute after use
      std::vector<std::uint32_t> full;
      for (double w : weight_parts) full.push_back(b.alloc(w * h * h * bytes, 1));
      return full;
    };
    for (int l = 0; l < layers; ++l) {
      std::vector<std::uint32_t> full;
      if (fsdp) full = gather();
      for (double a : act_parts) saved[l].push_back(b.alloc(a * tokens * h * bytes));
      b.free(b.alloc(16 * tokens * 512 * bytes));  // attention workspace (16 heads x T x 512)
      b.free_all(full);
    }
    std::vector<std::uint32_t> grads;
    for (int l = layers; l-- > 0;) {
      std::vector<std::uint32_t> full;
      if (fsdp) full = gather();
      auto dx = b.alloc(tokens * h * bytes);
      auto dqkv = b.alloc(3 * tokens * h * bytes);
      auto dfc = b.alloc(4 * tokens * h * bytes);
      for (double w : weight_parts) grads.push_back(b.alloc(w * h * h * bytes));
      b.free(dfc);
      b.free(dqkv);
      b.free(dx);
      b.free_all(saved[l]);
      b.free_all(full);
      if (fsdp) b.free_all(grads, 1);  // reduce-scattered: the full gradient is freed on the second stream
    }
    b.free_and_check(grads);  // optimizer step, then zero_grad(set_to_none)
  }
  return b.finish(weights);
}

/// Lognormal sizes (median 1 MiB, sigma 2) clipped to [512 B, 256 MiB]; up to 192 live; frees in random order.
trace lognormal(bool cross, std::uint32_t seed, double scale) {
  builder b(cross ? "lognormal, random cross-stream frees" : "lognormal", scale);
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> size(std::log(1 << 20), 2.0);
  std::vector<std::uint32_t> live;
  const int ops = 6000;
  for (int i = 0; i < ops; ++i) {
    const bool grow = live.size() < 8 || (live.size() < 192 && (rng() & 1));
    if (grow) {
      const double s = std::clamp(size(rng), 512.0, double(256 << 20));
      live.push_back(b.alloc(s, cross ? static_cast<int>(rng() & 1) : 0));
    } else {
      const std::size_t k = rng() % live.size();
      b.free(live[k], cross ? static_cast<int>(rng() & 1) : 0);
      live[k] = live.back();
      live.pop_back();
    }
    if (i % 500 == 499) b.checkpoint();
  }
  return b.finish(live);
}

std::vector<trace> all(double scale) {
  std::vector<trace> out;
  out.push_back(transformer(false, 1, scale));
  out.push_back(transformer(true, 2, scale));
  out.push_back(lognormal(false, 3, scale));
  out.push_back(lognormal(true, 4, scale));
  out.push_back(moe(5, scale));
  out.push_back(recompute(6, scale));
  out.push_back(kv_cache(7, scale));
  return out;
}

std::string check(const trace& t) {
  enum : char { unborn, live, freed };
  std::vector<char> state(t.ids, unborn);
  std::vector<std::size_t> size(t.ids, 0);
  std::uint64_t now = 0, peak = 0;
  for (std::size_t i = 0; i < t.ops.size(); ++i) {
    const op& o = t.ops[i];
    if (o.id >= t.ids) return fmt::format("{}: op {} names buffer {} of {}", t.name, i, o.id, t.ids);
    if (o.stream != 0 && o.stream != 1) return fmt::format("{}: op {} on stream {}", t.name, i, o.stream);
    if (o.alloc) {
      if (state[o.id] != unborn) return fmt::format("{}: buffer {} allocated twice (op {})", t.name, o.id, i);
      if (o.size < 512 || o.size % 512 != 0) return fmt::format("{}: buffer {} of {} bytes", t.name, o.id, o.size);
      state[o.id] = live, size[o.id] = o.size, now += o.size, peak = std::max(peak, now);
    } else {
      if (state[o.id] != live) return fmt::format("{}: buffer {} freed while not live (op {})", t.name, o.id, i);
      state[o.id] = freed, now -= size[o.id];
    }
  }
  for (std::uint32_t id = 0; id < t.ids; ++id)
    if (state[id] != freed) return fmt::format("{}: buffer {} never freed", t.name, id);
  for (std::size_t k = 0; k < t.checkpoints.size(); ++k)
    if (t.checkpoints[k] == 0 || t.checkpoints[k] > t.ops.size() || (k > 0 && t.checkpoints[k] <= t.checkpoints[k - 1]))
      return fmt::format("{}: checkpoint {} at op {} out of order", t.name, k, t.checkpoints[k]);
  if (t.checkpoints.empty() || t.checkpoints.back() != t.ops.size())
    return fmt::format("{}: the last checkpoint is not at the end", t.name);
  if (peak != t.peak_live) return fmt::format("{}: peak_live {} where the ops give {}", t.name, t.peak_live, peak);
  return {};
}

}  // namespace bench::tracegen
