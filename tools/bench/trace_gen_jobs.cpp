// pvmm-bench traces: the families that stress what real jobs do beyond a dense training step (issue 50 item 1):
//   moe        a mixture-of-experts training step: per layer and step the router sends each expert a different
//              token count, so every expert buffer has a new size; the dispatched tokens arrive on the second
//              stream (the all-to-all's) and are freed on the compute stream
//   recompute  activation recomputation: the forward pass keeps only each layer's input, and the backward pass
//              recomputes a layer's activations in one burst of large blocks (attention scores of up to 512 MiB)
//              that lives only for that layer's backward; the batch (so every size) changes per step
//   kv cache   an inference server with continuous batching: each request's KV cache grows by reallocation in
//              128-token steps as it decodes and is freed when it finishes, per-step logits sized by the batch,
//              prefill bursts; arrivals come in two busy spans with quiet after each, so the cache grows and shrinks
// Random numbers come from trace_gen.hpp's portable helpers: the same seed gives the same trace everywhere.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "trace_gen.hpp"

namespace bench::tracegen {

namespace {
double tokens_per_step(std::mt19937_64& rng, int t_max) {  // uniform in [t_max / 2, t_max], a multiple of 64
  return 64.0 * double(uniform_int(rng, t_max / 128, t_max / 64));
}
}  // namespace

/// bf16, h = 2048, 4 layers of attention (qkv 3h^2, out h^2) and 32 experts (w1 h x 2f gated, w2 f x h, f = 704),
/// top-4 routing, 3 steps of T tokens uniform in [2048, 4096]. An expert's share of the T x 4 assignments is
/// exponentially distributed (uneven, some experts near idle), redrawn per layer and step.
trace moe(std::uint32_t seed, double scale) {
  builder b("mixture of experts, per-expert token counts", scale);
  std::mt19937_64 rng(seed);
  const double h = 2048, f = 704, bytes = 2;
  const int layers = 4, experts = 32, top_k = 4, steps = 3, t_max = 4096;
  std::vector<std::uint32_t> weights;
  for (int l = 0; l < layers; ++l) {
    weights.push_back(b.alloc(3 * h * h * bytes));
    weights.push_back(b.alloc(h * h * bytes));
    weights.push_back(b.alloc(h * experts * bytes));  // router
    for (int e = 0; e < experts; ++e) {
      weights.push_back(b.alloc(h * 2 * f * bytes));
      weights.push_back(b.alloc(f * h * bytes));
    }
  }
  for (int step = 0; step < steps; ++step) {
    const double tokens = tokens_per_step(rng, t_max);
    std::vector<std::vector<std::uint32_t>> saved(layers);
    std::vector<std::vector<double>> counts(layers, std::vector<double>(experts));
    for (int l = 0; l < layers; ++l) {
      for (double a : {1.0, 3.0, 1.0}) saved[l].push_back(b.alloc(a * tokens * h * bytes));  // ln in, qkv, attn out
      b.free(b.alloc(16 * tokens * 512 * bytes));                                            // attention workspace
      saved[l].push_back(b.alloc(tokens * experts * 4));                                     // router logits, fp32
      saved[l].push_back(b.alloc(tokens * top_k * 4));                                       // top-k indices
      saved[l].push_back(b.alloc(tokens * top_k * 4));                                       // top-k weights
      double total = 0;
      for (auto& c : counts[l]) total += c = -std::log(1.0 - uniform01(rng));
      for (auto& c : counts[l]) c = std::floor(c / total * tokens * top_k);
      saved[l].push_back(b.alloc(tokens * top_k * h * bytes, 1));  // dispatched tokens (all-to-all, second stream)
      std::vector<std::uint32_t> outs;
      for (double n : counts[l]) {
        if (n == 0) continue;
        saved[l].push_back(b.alloc(n * 2 * f * bytes));  // gate and up projections
        saved[l].push_back(b.alloc(n * f * bytes));      // activation
        outs.push_back(b.alloc(n * h * bytes));          // expert output
      }
      saved[l].push_back(b.alloc(tokens * h * bytes));  // combined output
      b.free_all(outs);
    }
    std::vector<std::uint32_t> grads;
    for (int l = layers; l-- > 0;) {
      auto dy = b.alloc(tokens * h * bytes);
      auto dispatched = b.alloc(tokens * top_k * h * bytes, 1);  // gradients sent back through the all-to-all
      for (int e = 0; e < experts; ++e) {
        const double n = counts[l][std::size_t(e)];
        if (n > 0) {
          std::vector<std::uint32_t> tmp{b.alloc(n * h * bytes), b.alloc(n * f * bytes), b.alloc(n * 2 * f * bytes)};
          b.free_all(tmp);
        }
        grads.push_back(b.alloc(h * 2 * f * bytes));
        grads.push_back(b.alloc(f * h * bytes));
      }
      for (double w : {3.0, 1.0}) grads.push_back(b.alloc(w * h * h * bytes));
      grads.push_back(b.alloc(h * experts * bytes));
      b.free(dispatched);  // on the compute stream, after its use there
      b.free(dy);
      b.free_all(saved[l]);
    }
    b.free_and_check(grads);
  }
  return b.finish(weights);
}

/// bf16, h = 2048, 16 heads, sequences of 2048, 16 layers (qkv, out, fc1, fc2 weights), 6 steps of 1 to 4
/// sequences. Forward: each layer's burst (ln, qkv, scores, probabilities, attention out, fc1, gelu) is freed as
/// soon as the layer's output (the next checkpoint) exists. Backward, per layer from the last: the burst again,
/// then the gradients' temporaries (scores' gradient among them) and the weight gradients, and the burst is freed.
trace recompute(std::uint32_t seed, double scale) {
  builder b("activation recomputation, bursts of large blocks", scale);
  std::mt19937_64 rng(seed);
  const double h = 2048, heads = 16, seq = 2048, bytes = 2;
  const int layers = 16, steps = 6;
  const double weight_parts[] = {3, 1, 4, 4};
  std::vector<std::uint32_t> weights;
  for (int l = 0; l < layers; ++l)
    for (double w : weight_parts) weights.push_back(b.alloc(w * h * h * bytes));
  for (int step = 0; step < steps; ++step) {
    const double batch = double(uniform_int(rng, 1, 4)), tokens = batch * seq;
    const double scores = heads * batch * seq * seq * bytes;
    auto burst = [&] {
      std::vector<std::uint32_t> ids;
      for (double a : {1.0, 3.0}) ids.push_back(b.alloc(a * tokens * h * bytes));       // ln out, qkv
      ids.push_back(b.alloc(scores));                                                   // scores
      ids.push_back(b.alloc(scores));                                                   // softmax
      for (double a : {1.0, 4.0, 4.0}) ids.push_back(b.alloc(a * tokens * h * bytes));  // attn out, fc1, gelu
      return ids;
    };
    std::vector<std::uint32_t> inputs{b.alloc(tokens * h * bytes)};  // the embedding output: layer 0's input
    for (int l = 0; l < layers; ++l) {
      auto acts = burst();
      inputs.push_back(b.alloc(tokens * h * bytes));  // the layer's output, the next checkpoint
      std::reverse(acts.begin(), acts.end());
      b.free_all(acts);
    }
    b.free(inputs.back());  // the last output, consumed by the loss
    inputs.pop_back();
    std::vector<std::uint32_t> grads;
    for (int l = layers; l-- > 0;) {
      auto acts = burst();
      std::vector<std::uint32_t> tmp;
      for (double a : {4.0, 1.0}) tmp.push_back(b.alloc(a * tokens * h * bytes));  // d fc1, d attn out
      tmp.push_back(b.alloc(scores));                                              // d scores
      tmp.push_back(b.alloc(3 * tokens * h * bytes));                              // d qkv
      for (double w : weight_parts) grads.push_back(b.alloc(w * h * h * bytes));
      b.free_all(tmp);
      b.free_all(acts);
      b.free(inputs[std::size_t(l)]);
    }
    b.free_and_check(grads);
  }
  return b.finish(weights);
}

/// 16 layers x 8 KV heads x 128 x K and V, bf16: 64 KiB of KV cache per token. 1200 decode steps, up to 32
/// requests at once; two waves of 600 steps: a request arrives with probability 0.5 per step in the first 200 and
/// 0.005 in the rest, prompt lognormal (median 512 tokens, in [16, 4096]), answer lognormal (median 128, in [8, 512]),
/// so the batch fills, then drains. Prefill: a burst of the prompt's activations, then its KV cache. Decode step:
/// hidden states and fp32 logits over a 128256-token vocabulary for the batch, freed after sampling; a cache full
/// at its capacity is reallocated 128 tokens larger (the copy's source freed after it).
trace kv_cache(std::uint32_t seed, double scale) {
  builder b("inference KV cache, growing and shrinking", scale);
  std::mt19937_64 rng(seed);
  const double h = 4096, vocab = 128256, per_token = 16 * 8 * 128 * 2 * 2, grow = 128;
  const int steps = 1200, max_batch = 32, period = 600;
  struct request {
    std::uint32_t kv;
    double length, capacity, left;
  };
  std::vector<request> active;
  for (int step = 0; step < steps; ++step) {
    const double p = step % period < period / 3 ? 0.5 : 0.005;  // busy, then nearly idle
    if (int(active.size()) < max_batch && uniform01(rng) < p) {
      const double prompt = std::round(std::clamp(lognormal(rng, 512, 0.8), 16.0, 4096.0));
      const double answer = std::round(std::clamp(lognormal(rng, 128, 0.9), 8.0, 512.0));
      std::vector<std::uint32_t> acts;
      for (double a : {1.0, 3.0, 14.0 / 4}) acts.push_back(b.alloc(a * prompt * h * 2));  // hidden, qkv, mlp
      const double capacity = std::ceil((prompt + 1) / grow) * grow;
      active.push_back({b.alloc(capacity * per_token), prompt, capacity, answer});
      b.free_all(acts);
    }
    if (!active.empty()) {
      const double batch = double(active.size());
      std::vector<std::uint32_t> tmp{b.alloc(batch * h * 2), b.alloc(batch * vocab * 4)};  // hidden, logits
      b.free_all(tmp);
    }
    for (std::size_t i = 0; i < active.size();) {
      request& r = active[i];
      r.length += 1;
      r.left -= 1;
      if (r.left <= 0) {
        b.free(r.kv);
        active[i] = active.back();
        active.pop_back();
        continue;
      }
      if (r.length >= r.capacity) {
        const std::uint32_t old = r.kv;
        r.capacity += grow;
        r.kv = b.alloc(r.capacity * per_token);
        b.free(old);
      }
      ++i;
    }
    if (step % 100 == 99) b.checkpoint();
  }
  for (auto& r : active) b.free(r.kv);
  b.checkpoint();
  return b.t;
}

}  // namespace bench::tracegen
