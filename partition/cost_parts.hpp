// The small cost figures of cost_model.cpp's counting rules, layer by layer (linear, norms, activations, the
// attention core, residual adds), shared by the common block kinds (cost_model.cpp) and the family-owned
// kinds (partition/families/<family>_block.cpp). Internal to partition/: a composite block's figures are the
// sum of its parts, so a change to one layer's stash is one change here.
#pragma once

#include <algorithm>
#include <cstdint>

#include "partition/cost_model.hpp"

namespace cleave::partition::cost_parts {

constexpr std::int64_t kStatBytes = 4;  // f32 statistics, i32 ids / targets / argmax

struct Parts {
  double fwd = 0, in = 0, wt = 0;
  std::int64_t params = 0;
  std::int64_t act_float = 0;  // float elements stashed (× b)
  std::int64_t act_fixed = 0;  // bytes of f32 / i32 stashed

  Parts& operator+=(const Parts& o) {
    fwd += o.fwd;
    in += o.in;
    wt += o.wt;
    params += o.params;
    act_float += o.act_float;
    act_fixed += o.act_fixed;
    return *this;
  }
};

// y[rows, out] = x[rows, in] · Wᵀ (+ bias); stashes x.
inline Parts linear(std::int64_t rows, std::int64_t in, std::int64_t out, bool bias) {
  const double gemm = 2.0 * static_cast<double>(rows) * static_cast<double>(in) * static_cast<double>(out);
  Parts p;
  p.fwd = gemm + (bias ? static_cast<double>(rows * out) : 0.0);
  p.in = gemm;
  p.wt = gemm + (bias ? static_cast<double>(rows * out) : 0.0);
  p.params = in * out + (bias ? out : 0);
  p.act_float = rows * in;
  return p;
}

// Stashes x, mean and rstd.
inline Parts layernorm(std::int64_t rows, std::int64_t cols) {
  const double n = static_cast<double>(rows * cols);
  Parts p;
  p.fwd = 8 * n;
  p.in = 10 * n;
  p.wt = 5 * n;
  p.params = 2 * cols;
  p.act_float = rows * cols;
  p.act_fixed = 2 * rows * kStatBytes;
  return p;
}

// Stashes its input.
inline Parts gelu(std::int64_t n) {
  Parts p;
  p.fwd = 8.0 * static_cast<double>(n);
  p.in = 12.0 * static_cast<double>(n);
  p.act_float = n;
  return p;
}

inline Parts relu(std::int64_t n) {
  Parts p;
  p.fwd = static_cast<double>(n);
  p.in = static_cast<double>(n);
  p.act_float = n;
  return p;
}

// Query/key pairs causal attention computes over T positions: key j is visible to query i iff j <= i and, with a
// sliding window w > 0, i - j < w (kernels/ops/ops.hpp "Attention"). Both kernels (kernels/cpu/flash_attention.cpp,
// kernels/cuda/flash_attention.cu) skip every key block that no query row of the tile sees, so their work is these
// pairs plus the masked part of the tiles on the mask's edge (at most one tile width per row, not counted).
inline double attended_pairs(std::int64_t t, std::int64_t window) {
  const double n = static_cast<double>(t);
  if (window <= 0 || window >= t) return n * (n + 1) / 2;  // the causal half, diagonal included
  const double w = static_cast<double>(window);
  return w * (w + 1) / 2 + (n - w) * w;  // the first w rows see i + 1 keys, the rest w
}

// Core attention on qkv [T, 3D] -> [T, D], memory-efficient (kernels/ops/ops.hpp "Attention"): stashes qkv and the
// per-row log-sum-exp [H, T] (f32), never the [H, T, T] probabilities; its output is the output projection's
// stashed input (one storage, counted there). FLOPs count the visible query/key pairs (attended_pairs: the causal
// half, or the sliding window), as the kernels compute; the backward recomputes S = Q·Kᵀ.
inline std::int64_t attention_stats_bytes(std::int64_t t, std::int64_t heads) { return heads * t * kStatBytes; }

// The products' FLOPs attention() counts: 2·d per visible pair and product; 2 products forward (Q·Kᵀ, P·V), 5 in the
// backward (S again, dP = dO·Vᵀ, dV = Pᵀ·dO, dQ = dS·K, dK = dSᵀ·Q).
inline double attention_product_flops(std::int64_t t, std::int64_t d, std::int64_t window, int products) {
  return products * 2 * attended_pairs(t, window) * static_cast<double>(d);
}
inline constexpr int kAttentionForwardProducts = 2;
inline constexpr int kAttentionBackwardProducts = 5;

// The same products as Megatron and torchtitan count model FLOPs (their 12·L·d·T per token): every one of the T²
// scores, no causal half, no window, no recomputed S: 4·d per score forward and 8·d backward. Used for MFU only
// (engine/train/throughput.hpp), so that an MFU printed here compares with theirs.
inline double attention_product_flops_as_peers_count(std::int64_t t, std::int64_t d) {
  const double n = static_cast<double>(t);
  return 12 * n * n * static_cast<double>(d);
}

inline Parts attention(std::int64_t t, std::int64_t d, std::int64_t heads, std::int64_t window = 0) {
  const double scores = static_cast<double>(heads) * attended_pairs(t, window);
  Parts p;
  p.fwd = attention_product_flops(t, d, window, kAttentionForwardProducts) + 5 * scores;  // + online softmax
  p.in = attention_product_flops(t, d, window, kAttentionBackwardProducts) + 5 * scores;  // + softmax backward
  p.act_float = 3 * t * d;
  p.act_fixed = attention_stats_bytes(t, heads);
  return p;
}

inline Parts residual_add(std::int64_t n) {
  Parts p;
  p.fwd = static_cast<double>(n);
  p.in = static_cast<double>(n);  // the residual gradient is summed into the branch gradient
  return p;
}

// Stashes x and rstd.
inline Parts rmsnorm(std::int64_t rows, std::int64_t cols) {
  const double n = static_cast<double>(rows * cols);
  Parts p;
  p.fwd = 4 * n;
  p.in = 6 * n;
  p.wt = 3 * n;
  p.params = cols;
  p.act_float = rows * cols;
  p.act_fixed = rows * kStatBytes;
  return p;
}

// A transformer-like block's forward stash under train.recompute: `plain` is what it keeps without
// recomputation; selective drops the attention statistics (`stats`, the log-sum-exp) and rebuilds them inside I;
// full keeps only `input` and rebuilds all of `plain` inside I.
inline void apply_recompute(BlockCost& cost, Recompute recompute, std::int64_t plain, std::int64_t stats,
                     std::int64_t input) {
  if (recompute == Recompute::kSelective) {
    cost.recompute_transient_bytes = stats;
    cost.activation_bytes = plain - stats;
  } else if (recompute == Recompute::kFull) {
    cost.recompute_transient_bytes = plain;
    cost.activation_bytes = input;
  } else {
    cost.activation_bytes = plain;
  }
}

// The fields every block_cost fills from its parts: FLOPs, parameters and the forward stash for `b`-byte
// elements; `output_bytes` is the boundary tensor's.
inline BlockCost base_cost(const Parts& p, std::int64_t b, std::int64_t output_bytes) {
  BlockCost cost;
  cost.forward_flops = p.fwd;
  cost.input_grad_flops = p.in;
  cost.weight_grad_flops = p.wt;
  cost.param_count = p.params;
  cost.param_bytes = p.params * b;
  cost.activation_bytes = p.act_float * b + p.act_fixed;
  cost.output_bytes = output_bytes;
  return cost;
}

// train.recompute on a family's repeated layer without tensor parallelism (cost_model.hpp): selective reruns
// the attention core inside I and drops its statistics (lse) from the stash; full keeps only the input [T, D].
inline void recompute_repeated_layer(BlockCost& cost, const BlockSpec& block, Recompute recompute, std::int64_t b) {
  if (recompute == Recompute::kNone) return;
  const std::int64_t t = block.seq_len, d = block.in_features, h = block.n_heads;
  if (recompute == Recompute::kSelective) {
    const Parts core = attention(t, d, h, block.attention_window);
    cost.input_grad_flops += core.fwd;
    (void)b;
    cost.recompute_transient_bytes = attention_stats_bytes(t, h);
    cost.activation_bytes -= cost.recompute_transient_bytes;
  } else {
    cost.input_grad_flops += cost.forward_flops;
    cost.recompute_transient_bytes = cost.activation_bytes;
    cost.activation_bytes = t * d * b;
  }
}

// A transformer-like block's backward_extra_bytes from the rises inside its I of its two phases, `mlp` and
// `attention` (the larger wins): selective recomputation rebuilds the attention statistics inside the attention
// phase; full recomputation rebuilds the whole stash but the input, `kept_input` bytes it already counts.
inline std::int64_t repeated_layer_backward_extra(const BlockCost& cost, Recompute recompute, std::int64_t mlp,
                                                  std::int64_t attention, std::int64_t kept_input) {
  if (recompute == Recompute::kSelective) attention += cost.recompute_transient_bytes;
  std::int64_t extra = std::max(mlp, attention);
  if (recompute == Recompute::kFull) extra += cost.recompute_transient_bytes - kept_input;
  return extra;
}

}  // namespace cleave::partition::cost_parts
