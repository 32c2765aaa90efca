// TEMPORARY, TO BE REPLACED: block attention with log-sum-exp for ring attention, written against the API the
// memory-efficient attention op commits (branch `flash`, kernels/ops/ops.hpp: ops::attention_forward /
// attention_backward with AttentionParams {q_offset, k_offset, causal, accumulate_grads} and
// ops::attention_merge), until that op's CPU kernel lands. Same shapes and semantics as there, so the swap is a
// rename: ring_attention.cpp calls only these three functions.
//
// A plain host loop in double precision, CPU tensors only (f32 or bf16; bf16 rounded once on write): a
// reference, not a kernel; it throws on any other device. No [T, T] probabilities are kept.
//   q, out, dout, dq [B, Tq, Hq·hd]; k, v, dk, dv [B, Tk, Hkv·hd]; lse [B, Hq, Tq] f32.
//   Query i (position q_offset + i) sees key j (position k_offset + j) iff not causal or k pos <= q pos.
//   A row that sees no key: out 0, lse -inf.
#pragma once

#include <cstdint>

#include "layers/layer.hpp"

namespace cleave::layers::local_block_attention {

struct Params {
  std::int64_t q_heads = 0, kv_heads = 0;
  std::int64_t q_offset = 0, k_offset = 0;
  bool causal = true;
  bool accumulate_grads = false;  // backward: dq, dk, dv += instead of =
};

void forward(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
             const Tensor& lse, const Params& params);
// Gradients from the final (merged) out and lse.
void backward(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
              const Tensor& lse, const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv,
              const Params& params);
// lse = log(exp(lse_a) + exp(lse_b)); out = exp(lse_a - lse) out_a + exp(lse_b - lse) out_b (per row; may alias a).
void merge(const Context& ctx, const Tensor& out_a, const Tensor& lse_a, const Tensor& out_b, const Tensor& lse_b,
           const Tensor& out, const Tensor& lse);

}  // namespace cleave::layers::local_block_attention
