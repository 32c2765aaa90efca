// Ring attention (parallel.context_parallel_comm "ring"; docs/multi-rank.md#context-parallelism): the
// attention core of a context-parallel rank whose keys and values travel around the cp group.
//
// Layout (CpLayout, ring): the sequence is cut into 2·cp chunks of c tokens; rank r holds chunks r and
// 2cp-1-r, so every rank has the same causal work. Forward, cp steps: at step s rank r holds the keys and values
// of rank (r - s) mod cp; each of its two query chunks attends each held key chunk that is not wholly in its
// future (block attention with the chunks' global positions as q_offset and k_offset: the diagonal
// chunk causally, earlier chunks whole), and the partial results are merged by their log-sum-exp
// (attention_merge), which is exact up to rounding (the softmax over the union of key sets). While a step
// computes, the next keys and values are already on their way (batch_p2p to r+1, from r-1).
// Backward, cp steps again: the held keys and values travel with their gradient accumulators dK, dV; each
// step adds its blocks' contributions (the block backward with accumulate_grads, using the merged out and
// lse of the forward) to dQ (local) and to the travelling dK, dV, which after cp hops arrive back at their
// owner. Partial gradients are summed in a fixed order per rank: deterministic.
// Precision (docs/ops.md: bf16 operands, f32 accumulation): the block outputs, their merge, dQ and the travelling
// dK, dV are f32 in either precision; under bf16 the blocks run on widened copies of the bf16 q, k, v (and, in the
// backward, the rounded out and dout, as one rank's backward reads them), rounding P and dS to bf16 before their
// value products as one rank's bf16 attention does (AttentionParams::bf16_roundings; on the CPU P's shift is a
// multiple of ln 2, so a block rounds P as the whole row's call does), and each result is rounded once at the end,
// so a bf16 ring differs from one rank's bf16 attention by one rounding of an f32 reassociation at most (a P or dS
// rounding tipped by the reassociation aside). The K/V blocks travel in the compute dtype, dK/dV in f32.
//
// qkv [B, Tl, (Hq + 2·Hkv)·hd] packed q | k | v; out [B, Tl, Hq·hd]; dqkv like qkv. Stash: {q chunk 0, q
// chunk 1, k 0, k 1, v 0, v 1, out 0, out 1, lse 0, lse 1} (chunk-major copies [B, c, ...], lse [B, Hq, c]
// f32), or {qkv} under selective recomputation (backward reruns the forward ring first).
// Sliding window (RingHeads::window w > 0): the block op gets w with the chunks' global offsets, and a pair of
// chunks whose nearest query/key distance is w or more is skipped (no op call, nothing merged): a chunk of c
// tokens then attends only the ceil(w / c) + 1 nearest chunks at most, in the forward and the backward alike.
// The K/V blocks still travel the whole ring (every step's send is posted before its compute is known).
// The block attention is the seam's memory-efficient attention (ops::attention_forward with q_offset /
// k_offset, attention_backward with accumulate_grads, attention_merge): CPU and CUDA.
#pragma once

#include <cstdint>
#include <string>

#include "layers/layer.hpp"

namespace cleave::layers {

struct RingHeads {
  std::int64_t q_heads = 0, kv_heads = 0, head_dim = 0;
  std::int64_t window = 0;  // Mistral's sliding window in keys (0: none), over global positions
};

Tensor ring_attention_forward(Context& ctx, const Tensor& qkv, const RingHeads& heads, bool recompute, Stash& stash,
                              const std::string& who);
Tensor ring_attention_backward(Context& ctx, const Tensor& dout, const RingHeads& heads, bool recompute, Stash& stash,
                               const std::string& who);

}  // namespace cleave::layers
