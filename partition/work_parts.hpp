// The kernels of block_work.cpp's passes, layer by layer (linear, norms, pointwise, residual, the attention
// core), shared by the common block kinds (block_work.cpp) and the family-owned kinds
// (partition/families/<family>_block.cpp). Internal to partition/; mirrors cost_parts.hpp.
#pragma once

#include "partition/block_work.hpp"
#include "partition/cost_parts.hpp"

namespace cleave::partition::work_parts {

using D = double;

// y[rows, out] = x[rows, in] · Wᵀ (+ bias, fused): dx = dy · W, dW = dyᵀ · x, db = Σ dy.
inline void linear(BlockWork& w, D rows, D in, D out, bool bias, D b) {
  w.forward.gemms.push_back({rows, out, in});
  w.input_grad.gemms.push_back({rows, in, out});
  w.weight_grad.gemms.push_back({out, in, rows});
  w.forward.kernels += 1;
  w.input_grad.kernels += 1;
  w.weight_grad.kernels += 1;
  if (bias) {
    w.weight_grad.stream_bytes += rows * out * b;
    w.weight_grad.kernels += 1;  // db = Σ dy
  }
}

// A SwiGLU feed-forward over `rows` tokens, `f` wide on this rank: gate and up (d -> f), silu(gate) · up (reads
// gate, up, writes h; its backward reads gate, up, dh, writes dgate, dup), down (f -> d). No biases.
inline void swiglu(BlockWork& w, D rows, D d, D f, D b) {
  linear(w, rows, d, f, false, b);
  linear(w, rows, d, f, false, b);
  w.forward.stream_bytes += 3 * rows * f * b;
  w.input_grad.stream_bytes += 5 * rows * f * b;
  w.forward.kernels += 1;
  w.input_grad.kernels += 1;
  linear(w, rows, f, d, false, b);
}

// Reads x, writes y; backward reads x and dy, writes dx; weight grads read x and dy.
inline void layernorm(BlockWork& w, D n, D b) {
  w.forward.stream_bytes += 2 * n * b;
  w.input_grad.stream_bytes += 3 * n * b;
  w.weight_grad.stream_bytes += 2 * n * b;
  w.forward.kernels += 1;
  w.input_grad.kernels += 1;
  w.weight_grad.kernels += 1;
}

// The residual add fused into the norm after it (ops::add_rmsnorm_forward / add_rmsnorm_backward_input: a pre-norm
// block's x1 = x + branch, norm(x1)): F reads x and branch, writes x1 and the norm's output (4n·b, one kernel); I
// reads dout, x1 and the residual's gradient, writes dx1 (4n·b, one kernel); W as the norm's (reads dout and x1).
// The unfused pair, residual() then layernorm(), moves 5n·b in F and 6n·b in I over two kernels each.
inline void add_norm(BlockWork& w, D n, D b) {
  w.forward.stream_bytes += 4 * n * b;
  w.input_grad.stream_bytes += 4 * n * b;
  w.weight_grad.stream_bytes += 2 * n * b;
  w.forward.kernels += 1;
  w.input_grad.kernels += 1;
  w.weight_grad.kernels += 1;
}

inline void pointwise(BlockWork& w, D n, D b) {  // GELU, ReLU
  w.forward.stream_bytes += 2 * n * b;
  w.input_grad.stream_bytes += 3 * n * b;
  w.forward.kernels += 1;
  w.input_grad.kernels += 1;
}

inline void residual(BlockWork& w, D n, D b) {  // y = x + f(x): reads two, writes one; its gradient is summed likewise
  w.forward.stream_bytes += 3 * n * b;
  w.input_grad.stream_bytes += 3 * n * b;
  w.forward.kernels += 1;
  w.input_grad.kernels += 1;
}

// Core attention for `batch` (samples x local heads) heads of width dh over T positions, memory-efficient: the
// scores and probabilities stay in on-chip blocks (no [T, T] stream); the backward recomputes S. The output
// and statistics are a few [T, dh] streams, small beside the GEMMs. Only the visible query/key pairs are
// computed (`pairs`, cost_parts::attended_pairs: the causal half or the sliding window; the kernels skip fully
// masked key blocks), so each [T, T]-shaped product is priced as T rows by pairs / T keys.
// One product of the fused kernel, tagged with its pass and the kernel's shape (Gemm::attention_pass).
inline Gemm attention_product(D m, D n, D k, D batch, AttentionPass pass, D t, D dh, D keys) {
  Gemm g{m, n, k, batch, true};
  g.attention_pass = pass;
  g.attention_seq = t;
  g.attention_head_dim = dh;
  g.attention_causal = keys < t;
  return g;
}

inline PassWork attention_forward(D batch, D t, D dh, D b, D pairs) {
  const D keys = pairs / t;  // mean visible keys per query row
  const auto product = [&](D m, D n, D k) { return attention_product(m, n, k, batch, AttentionPass::kForward, t, dh, keys); };
  PassWork p;
  p.gemms.push_back(product(t, keys, dh));  // S = Q·Kᵀ
  p.gemms.push_back(product(t, dh, keys));  // O = P·V
  p.stream_bytes += batch * t * (dh * b + 4);  // out rescaled once, lse
  p.kernels = 1;                                // one fused kernel
  return p;
}

inline PassWork attention_backward(D batch, D t, D dh, D b, D pairs) {
  const D keys = pairs / t;
  const auto product = [&](D m, D n, D k) { return attention_product(m, n, k, batch, AttentionPass::kBackward, t, dh, keys); };
  PassWork p;
  p.gemms.push_back(product(t, keys, dh));  // S = Q·Kᵀ again
  p.gemms.push_back(product(t, keys, dh));  // dP = dO·Vᵀ
  p.gemms.push_back(product(t, dh, keys));  // dV = Pᵀ·dO
  p.stream_bytes += 2 * batch * t * dh * b;  // D = rowsum(dO * O)
  p.gemms.push_back(product(t, dh, keys));  // dQ = dS·K
  p.gemms.push_back(product(t, dh, keys));  // dK = dSᵀ·Q
  p.kernels = 2;                                  // D = rowsum(dO * O), then the fused backward
  return p;
}

}  // namespace cleave::partition::work_parts
