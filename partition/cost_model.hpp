// Per-block cost model: FLOPs, parameter bytes and memory of each block of a ModelSpec, per sample.
//
// Everything here is computed from the BlockSpec alone (no layers are built), so the partitioner and the
// schedule simulator can plan without devices. Figures are PER SAMPLE (one row of the batch: T tokens for
// gpt, one example for mlp / cnn); multiply by the micro-batch size.
//
// Invariant kept with layers/: activation_bytes is exactly what the CPU layer's forward() leaves in its
// Stash for one sample (tests/unit/layers checks the bytes held by a real stash against this number), so
// pipeline memory estimates are honest. A block's stash includes its own input when backward needs it and
// never its output, so summing activation_bytes over a stage's blocks counts each tensor once.
//
// Counting rules (b = dtype_size(dtype) for float tensors; statistics (LayerNorm mean / rstd, loss
// log-sum-exp) are always f32, ids and targets always i32, max-pool argmax i32):
//  - GEMM [m,k]x[k,n]: 2·m·n·k. Attention scores Q·Kᵀ and P·V are GEMMs; the causal mask is NOT exploited
//    in the count (full T×T), matching the attention kernel, which computes every score.
//  - forward: all forward GEMMs + elementwise work. input_grad: the GEMMs that produce input gradients
//    (same size as the forward weight GEMMs; attention backward has four T×T GEMMs, twice its forward) +
//    elementwise backward. weight_grad: the weight-gradient GEMMs + bias and norm-weight reductions.
//  - elementwise, per element: bias add 1 (its gradient 1, in weight_grad); residual add 1; ReLU 1 / 1;
//    GELU (tanh form) 8 forward / 12 backward; LayerNorm 8 forward, 10 input-grad, 5 weight-grad;
//    softmax over attention scores 5 forward (scale, max, exp, sum, divide), 5 backward; cross-entropy
//    4 per logit forward (max, subtract, exp, sum), 3 backward (exp, subtract one-hot, scale);
//    max-pool window² comparisons per output forward, 1 per output backward; embedding: position add 1 per
//    element forward, token + position scatter-add 2 per element weight-grad, no input gradient.
//
// Per block, with T = seq_len, D = d_model, F = d_ff, H = n_heads, V = vocab, and P = the query/key pairs
// attention computes (cost_parts::attended_pairs: T(T+1)/2 causal, w(w+1)/2 + (T-w)w with a sliding window w;
// the kernels skip the masked key blocks, so the softmax counts 5HP):
//  embedding        params V·D + T·D; activation T·4 (ids)
//  transformer      forward   8TD² + 4TDF + 4PD GEMM (+ elementwise); input_grad 8TD² + 4TDF + 10PD (the
//                   memory-efficient attention recomputes Q·Kᵀ); weight_grad 8TD² + 4TDF; params 4D² + 2DF + 9D + F;
//                   activation (8TD + 2TF)·b + H·T·4 + 4T·4: ln1 input, ln1 output, qkv [T,3D], attention
//                   log-sum-exp [H,T] (f32; no [H,T,T] probabilities), attention output, ln2 input, ln2 output,
//                   fc output [T,F], gelu output [T,F], and mean + rstd of both norms
//  llama block      (Hkv·hd = K) forward 4TD² + 4TDK + 6TDF + 4PD GEMM; params 2D² + 2DK + 3DF + 2D;
//                   activation (6TD + 2TK + 3TF)·b + H·T·4 + 2T·4: attn_norm input and output (q, k, v share it),
//                   packed rope'd qkv [T,D+2K] (kv heads once: grouped-query attention in the op), attention
//                   lse [H,T], attention output, mlp_norm
//                   input and output (gate and up share it), gate and up outputs, h [T,F], two rstd.
//                   RMSNorm 4 forward, 6 input-grad, 3 weight-grad per element; rope 3 / 3 per element of q
//                   and k; SwiGLU 5 / 10.
//                   The embedding of a llama has no position table (seq_len 0 in its BlockSpec).
//  final layernorm  params 2D; activation T·D·b + 2T·4
//  lm head          2TDV each for forward / input_grad / weight_grad; params V·D (the tied table too: the
//                   head owns or shares it; use unique_param_count() for a range); activation T·D·b
//  loss             activation T·V·b (logits) + T·4 (log-sum-exp) + T·4 (targets); output_bytes 0 (the
//                   scalar loss never crosses a stage boundary)
//  linear [F]->[O]  2FO (+O bias) / 2FO / 2FO (+O); params FO + O; activation F·b (its input)
//  relu, gelu       activation n·b (their input)
//  conv2d           2·C'·H·W·C·k² each (+C'HW bias forward and weight-grad); params C'·C·k² + C';
//                   activation C·H·W·b (its input; the im2col workspace is transient)
//  maxpool          activation C·H'·W'·4 (argmax)
//  flatten          zero (a view)
//
// Activation recomputation (train.recompute) changes only transformer and llama blocks (the same rules):
//  selective  the attention statistics (log-sum-exp [H, T], f32) are not kept; backward_input reruns the
//             attention core (Q·Kᵀ, softmax, P·V: 4PD + 5HP FLOPs) to rebuild them. activation −H·T·4;
//             transient H·T·4. (With memory-efficient attention there are no [H, T, T] probabilities to drop, so
//             selective saves little; it stays for its semantics and its tests.)
//  full       only the block's input [T, D] is kept; backward_input reruns the whole block's forward first.
//             activation T·D·b; input_grad + the block's forward FLOPs; transient = the block's whole stash.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/dtype.hpp"
#include "engine/core/enum_names.hpp"
#include "partition/collective.hpp"
#include "partition/model_spec.hpp"

namespace cleave::partition {

// train.recompute.
enum class Recompute { kNone, kSelective, kFull };
constexpr std::array<EnumName<Recompute>, 3> enum_names(Recompute) {
  return {{{Recompute::kNone, "none"}, {Recompute::kSelective, "selective"}, {Recompute::kFull, "full"}}};
}

struct BlockCost {
  double forward_flops = 0;      // per sample
  double input_grad_flops = 0;   // per sample: backward_input
  double weight_grad_flops = 0;  // per sample: backward_weight
  std::int64_t param_bytes = 0;       // parameter values held by the block (param_count · b)
  std::int64_t activation_bytes = 0;  // saved for backward by forward(), per sample
  std::int64_t output_bytes = 0;      // boundary tensor sent to the next block / stage, per sample
  std::int64_t param_count = 0;       // parameters held by the block (a tied head counts the table)
  // Of param_count, those a token does not run through: a moe block's E - top_k unchosen experts (0 elsewhere).
  std::int64_t inactive_param_count = 0;
  // Of param_count, those every tp rank holds whole under tensor parallelism (norms, row-parallel biases, learned
  // positions, a router); the rest is split over tp (a vocab-parallel table padded to a multiple of tp:
  // tp_rank_param_count). Independent of tp.
  std::int64_t replicated_param_count = 0;
  std::int64_t recompute_transient_bytes = 0;  // per sample: what recomputation rebuilds (in backward_extra_bytes)
  // Per sample: what the block holds from backward_input until backward_weight (split backward, zero-bubble
  // schedules): each weight's input and output gradient and the norms' statistics; the forward stash's
  // other tensors are freed by backward_input (a recomputed block has rebuilt its stash by then).
  std::int64_t weight_stash_bytes = 0;
  // Per sample: the most activation bytes live while backward_input runs beyond the block's forward stash: its
  // output gradient dy, the gradients it allocates (a transformer block: GELU's input and output gradients in
  // the MLP, 2·T·d_ff + T·d, or the attention's dy, dm, dx1, da, dout and dqkv, 4·T·d + 4·T·d/tp, whichever
  // is larger) and, under recomputation, the stash it rebuilds (selective: the attention statistics, in the
  // attention part; full: everything but the kept input). Counted from allocator snapshots at the peak of one rank's
  // 1F1B step (tests/e2e/recompute_test.cpp's model and two variants).
  std::int64_t backward_extra_bytes = 0;
  // Per sample: the most activation bytes live while backward_weight runs beyond the weight stash it starts
  // with: under sequence parallelism the lm head all-gathers its input shard again, [T, D], before it frees
  // anything (a transformer block's column-parallel projections gather theirs after the row-parallel ones have
  // freed more: 0). The memory plan adds it inside W, and inside B after the block's input gradient.
  std::int64_t weight_extra_bytes = 0;

  double total_flops() const { return forward_flops + input_grad_flops + weight_grad_flops; }
};

// Cost of one block for element type `dtype` (activations and parameters; see the counting rules above).
// `tp` > 1: the activation, weight-stash, transient and output bytes are one tensor-parallel rank's (Megatron
// layout: LayerNorm inputs and the inputs of the column-parallel qkv and fc1 are whole on every rank; q, k, v,
// the attention statistics (heads / tp), the row-parallel proj and fc2 inputs, the GELU input and the
// vocab-parallel logits are shards); FLOPs and parameters stay whole-model (callers divide by tp).
// `sequence_parallel` (parallel.sequence_parallel, tp > 1; layers/parallel/): the tensors the tp layout keeps
// whole are [T / tp, ...] sequence shards instead — the norms' inputs and statistics, the column-parallel
// inputs (stashed as shards, all-gathered again for the weight gradient), the residual stream and so every
// boundary tensor before the lm head's output — so a transformer block's activation (gpt's, or llama's with
// RmsNorm as LayerNorm and the input q/k/v and gate/up share as qkv's and fc1's) is its plain tp figure with
// every term divided by tp. Between I and W the row-parallel proj and fc2 (llama: o and down) keep their
// all-gathered dy [T, D]; what the backward allocates is counted in backward_extra_bytes. Communication: the all-reduce
// of each tp region becomes a reduce-scatter plus an all-gather of the same tensor — the same bytes on a
// ring ((tp-1)/tp of the tensor each way), one more collective; the column-parallel weight gradient adds
// one all-gather of its input shard per block part.
BlockCost block_cost(const BlockSpec& block, DType dtype = DType::kF32, Recompute recompute = Recompute::kNone,
                     int tp = 1, bool sequence_parallel = false);

// block_cost() of every block of `spec`, in block order.
std::vector<BlockCost> model_costs(const ModelSpec& spec, DType dtype = DType::kF32,
                                   Recompute recompute = Recompute::kNone, int tp = 1,
                                   bool sequence_parallel = false);

// The tensor-parallel collectives of one block on one tp rank, per pass and in the order the layers post them (the
// bytes are each collective's whole tensor: an all-reduce's buffer, a reduce-scatter's input, an all-gather's output;
// per sample unless kFixed). Plain tp: a transformer block (gpt, llama; a moe block's attention) all-reduces [T, D]
// twice in forward (the attention's output projection, the MLP's down projection) and twice in backward_input (the
// summed input gradients of the projections that share an input: q|k|v, fc1 or gate|up); Qwen3's q/k norms
// all-reduce their [head_dim] weight-gradient shares in backward_weight; a moe block's mixture all-reduces its output
// in forward, and in backward_input the combine weights' gradient [T, k] (f32) and its input gradient; the
// vocab-parallel embedding once in forward, the lm head once in backward_input, the loss its [T] row maxima and
// [2, T] sums in forward. Sequence parallelism: each of those [T, D] all-reduces becomes a reduce-scatter or an
// all-gather of the same [T, D] (the embedding's and each row-parallel output's reduce-scatter and each
// column-parallel input's all-gather in forward; dy's all-gather and dx's reduce-scatter in backward_input), posted
// per sample (kPerSample: a sample's sequence is contiguous, layers/parallel/tp_util.hpp), and every column-parallel
// input is all-gathered again in backward_weight (not the mixture's: it keeps its gathered input).
// On a ring the bytes each rank moves are (tp-1)/tp of the tensor for a reduce-scatter or an all-gather and
// twice that for an all-reduce, so a forward all-reduce (2 x) becomes an all-gather plus a reduce-scatter
// (1 + 1): same bytes, one more collective; backward_weight's all-gathers are what sequence parallelism adds.
// Full recomputation repeats the forward's collectives in backward_input, first. Empty when tp == 1. Proven against
// the collectives the layers post at tp 2 (tests/support/tp_collectives.hpp: gpt, llama, moe, every recompute mode,
// with and without sequence parallelism).
// How a collective follows the micro-batch of b samples.
enum class TpBatching {
  kWhole,      // one collective of b × bytes: the micro-batch's tensor
  kPerSample,  // b collectives of `bytes` each, posted together before any is waited for
  kFixed,      // one collective of `bytes`, whatever b (a weight gradient's share)
};
struct TpCollective {
  Collective op = Collective::kAllReduce;
  std::int64_t bytes = 0;
  TpBatching batching = TpBatching::kWhole;
};
struct TpBlockComm {
  std::vector<TpCollective> forward, input_grad, weight_grad;
};
// One tensor-parallel region of a block, appended to `c`'s passes (its backward_input part at the front of what is
// there: the backward runs the block's regions in reverse): entered by column-parallel projections that share its
// input, left by a row-parallel one, [T, D] of `stream` bytes per sample. Plain tp: an all-reduce of the output in F,
// of the summed input gradient in I; sequence parallelism: the input's all-gather and the output's reduce-scatter in
// F, dy's all-gather and dx's reduce-scatter in I, the input's all-gather again in W (when `regathers_input`), each
// per sample.
void add_tp_region(TpBlockComm& c, std::int64_t stream, bool sequence_parallel, bool regathers_input = true);
TpBlockComm tp_block_comm(const BlockSpec& block, DType dtype, int tp, bool sequence_parallel,
                          Recompute recompute = Recompute::kNone);

// Parameters held by blocks [first_block, last_block), counting a tied embedding table once when both the
// embedding and the tied head are in the range (they share one Param then; in different ranges each holds
// its own copy). Throws Error if the range is empty or out of bounds.
std::int64_t unique_param_count(const ModelSpec& spec, std::size_t first_block, std::size_t last_block);

// The parameters one token runs through: unique_param_count of the whole model less every block's
// inactive_param_count (a mixture of experts: top_k of n_experts experts per block). Equal to the total for dense
// models.
std::int64_t active_param_count(const ModelSpec& spec);

}  // namespace cleave::partition
