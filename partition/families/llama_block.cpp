// llama's block below the layers: its FLOPs, parameter, activation, weight-stash and backward bytes
// (block_cost), its roofline work (block_work), its tensor-parallel collectives (tp_block_comm) and the
// memory plan's widening figure, registered as llama_block_rules() in the family table.
//
// The formulas are cost_model.hpp's ("llama block"); the invariant kept with layers/ is that
// activation_bytes is exactly what layers/llama/llama_block.cpp leaves in the Stash for one sample.
// tp_block_comm lists no collectives for this block (as before the family table: the planner counts its two
// exchanges per pass through BlockRules::repeated_layer instead).
#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "engine/core/error.hpp"
#include "partition/block_work.hpp"
#include "partition/cost_model.hpp"
#include "partition/cost_parts.hpp"
#include "partition/families/family.hpp"
#include "partition/model_spec.hpp"
#include "partition/param_tensors.hpp"
#include "partition/work_parts.hpp"

namespace cleave::partition {
namespace {
namespace cost {

using namespace cost_parts;

// Llama block: q, k, v share their input (stashed once), rope packs q|k|v into [T, D + 2K] (K = Hkv·hd: the kv
// heads once, grouped-query attention in the op), the attention core stashes that and its statistics (lse);
// gate and up share their input; SwiGLU stashes gate and up outputs, down its input h.
Parts llama_parts(const BlockSpec& b) {
  const std::int64_t t = b.seq_len, d = b.in_features, f = b.d_ff, h = b.n_heads;
  CLEAVE_ASSERT(t > 0 && d > 0 && f > 0 && h > 0 && b.n_kv_heads > 0, "llama block {} has unset sizes", b.name);
  const std::int64_t kv = b.n_kv_heads * (d / h);
  Parts p = rmsnorm(t, d);
  p += linear(t, d, d, b.qkv_bias);
  Parts kv_proj = linear(t, d, kv, b.qkv_bias);
  kv_proj.act_float = 0;  // the input q stashed
  p += kv_proj;
  p += kv_proj;
  Parts rope;
  rope.fwd = 3.0 * static_cast<double>(t * (d + kv));  // rotate q and k: 3 per element
  rope.in = 3.0 * static_cast<double>(t * (d + kv));   // the rotations undone (k and v packed once: no sums)
  p += rope;
  Parts core = attention(t, d, h, b.attention_window);  // FLOPs per query head: GQA changes none
  core.act_float = t * (d + 2 * kv);                     // the packed q | k | v
  p += core;
  p += linear(t, d, d, false);
  p += residual_add(t * d);
  p += rmsnorm(t, d);
  p += linear(t, d, f, false);
  Parts up = linear(t, d, f, false);
  up.act_float = 0;  // the input gate stashed
  p += up;
  Parts swiglu;
  swiglu.fwd = 5.0 * static_cast<double>(t * f);
  swiglu.in = 10.0 * static_cast<double>(t * f);
  swiglu.act_float = 2 * t * f;
  p += swiglu;
  p += linear(t, f, d, false);
  p += residual_add(t * d);
  return p;
}

// The attention phase of the block's backward (bytes per sample, `b` bytes an element): the larger of its two levels
// above the block's start, each `held` (elements: what TransformerBlock::backward_input holds through the attention's
// backward) plus LlamaAttention::backward_input's own. While the core's backward runs: dq, dk, dv [T, (D + 2K)/tp]
// (allocated before the core), o's input gradient dout [T, D/tp] and the core's dqkv [T, (D + 2K)/tp]. Then,
// through the q, k, v projections' backward: dq, dk, dv and `partials` (their input gradients as they are summed),
// less what attention_core_backward released: its stash's q | k | v (as large as dq, dk, dv) and the statistics
// (f32; stashed, or rebuilt in the core under recomputation, where repeated_layer_backward_extra adds them to the
// phase); the output [T, D/tp] stays, o's stashed input until its weight gradient. With Qwen3's q/k norms (qk_norm) their backward replaces dq and dk and
// keeps the ones it was given [T, (D + K)/tp] for the norms' weight gradients. Measured (tp2, T 32, D 32, 4/2 heads,
// F D, micro-batch 2, GPipe: SequenceParallel.ActivationMemoryFollowsThePlan "llama qk"): the projections' level the
// block's peak with the norms, 1,536 B over the core's; before (the output taken as released, the statistics as
// held, the norms' dq, dk not counted) the plan was those 1,536 B under (512 B under selective recomputation).
std::int64_t attention_phases(const BlockSpec& block, int tp, std::int64_t held, std::int64_t partials,
                              std::int64_t b) {
  const std::int64_t t = block.seq_len, d = block.in_features;
  const std::int64_t kv = block.n_kv_heads * (d / block.n_heads);
  const std::int64_t qkv = t * (d + 2 * kv) / tp, out = t * d / tp;
  const std::int64_t norms = block.qk_norm ? t * (d + kv) / tp : 0;
  const std::int64_t stats = attention_stats_bytes(t, block.n_heads / tp);
  const std::int64_t core = (held + qkv + out + qkv) * b;
  const std::int64_t projections = (held + qkv + partials + norms - qkv) * b - stats;
  return std::max(core, projections);
}

BlockCost llama_cost_without_qk_norms(const BlockSpec& block, DType dtype, Recompute recompute, int tp,
                                      bool sequence_parallel) {
  const auto b = static_cast<std::int64_t>(dtype_size(dtype));
  BlockCost cost = base_cost(llama_parts(block), b, block.output.numel() * b);
  const std::int64_t t = block.seq_len, d = block.in_features, f = block.d_ff, h = block.n_heads;
  const std::int64_t kv = block.n_kv_heads * (d / h);
  // attn_norm (x, dy), q (x, dq), k (dk), v (dv) sharing q's x, o (x, dy), mlp_norm (x, dy), gate (x, dgate),
  // up (dup) sharing gate's x, down (h, dy); two rstd.
  cost.weight_stash_bytes = t * (10 * d + 3 * f + 2 * kv) * b + 2 * t * kStatBytes;
  cost.replicated_param_count = 2 * d;  // under tp: attn_norm and mlp_norm
  recompute_repeated_layer(cost, block, recompute, b);
  if (tp > 1) {
    // Replicated: x, attn_norm's output, x1, mlp_norm's output; sharded: qkv [T, (D + 2K)/tp], attention
    // statistics, attention output, gate, up, h.
    const std::int64_t plain = (4 * t * d + (t * (d + 2 * kv) + t * d + 3 * t * f) / tp) * b +
                               (h / tp) * t * kStatBytes + 2 * t * kStatBytes;
    cost.weight_stash_bytes = (8 * t * d + (2 * t * d + 2 * t * kv + 3 * t * f) / tp) * b + 2 * t * kStatBytes;
    apply_recompute(cost, recompute, plain, attention_stats_bytes(t, h / tp), t * d * b);
  }
  if (sequence_parallel && tp > 1) {
    const std::int64_t ts = t / tp;
    // attn_norm / mlp_norm inputs and outputs (shards; q, k, v share attn_norm's, gate and up mlp_norm's),
    // qkv [T, (D + 2K)/tp], attention output [T, D/tp], gate, up and h [T, F/tp], the attention statistics
    // [H/tp, T] (f32), two rstd of T/tp rows.
    const std::int64_t plain =
        (6 * t * d + 2 * t * kv + 3 * t * f) / tp * b + (h / tp) * t * kStatBytes + 2 * ts * kStatBytes;
    // From I to W o and down (row-parallel, bias-free) keep the gathered dy [T, D] their weight gradients read,
    // not the dy shard [T / tp, D] they were given (RowParallelLinear::backward_input keeps it for a bias
    // gradient only); the rest as plain tp with the replicated tensors as shards: 2TD + (8TD + 2TK + 3TF) / tp
    // (mpi_llama_stash_test_np2: exact per tp rank).
    cost.weight_stash_bytes = (2 * t * d + (8 * t * d + 2 * t * kv + 3 * t * f) / tp) * b + 2 * ts * kStatBytes;
    apply_recompute(cost, recompute, plain, attention_stats_bytes(t, h / tp), ts * d * b);
    cost.output_bytes = ts * d * b;
    // backward_extra: mlp: the dy shard, down's gathered dy [T, D], dh, dgate, dup [T, F/tp]; then gate's and
    // up's partial dx [T, D] (one at a time) and their reduce-scattered shards, with dgate and dup in place of
    // the gate and up outputs SwigluMlp releases first (with dh). attention: down's and o's gathered dy, the
    // shards dy, dm (the mlp's input gradient, RmsNorm keeps it) and dx1 through it, with attention_phases' terms
    // (the projections' one partial dx [T, D] and its reduce-scattered shard).
    const std::int64_t mlp = std::max(ts * d + t * d + 3 * t * f / tp, 2 * t * d + 3 * ts * d) * b;
    const std::int64_t attention = attention_phases(block, tp, 2 * t * d + 3 * ts * d, t * d + ts * d, b);
    cost.backward_extra_bytes = repeated_layer_backward_extra(cost, recompute, mlp, attention, ts * d * b);
    return cost;
  }
  // backward_extra: mlp: dy, dh, dgate, dup during swiglu_backward, then dy and the two input gradients of
  // gate and up, dgate and dup taking the place of the gate and up outputs SwigluMlp releases first (with dh;
  // measured at tp 2, T 32, D 32, F 96: the first figure is the block's whole rise inside its I);
  // attention: TransformerBlock::backward_input holds dy, the mlp's dm (RmsNorm keeps it) and dx1 through it,
  // with attention_phases' terms (the three input gradients of q, k, v summed into the first: two at once).
  // At tp > 1 the projections' partial input gradients are accumulated into one (layers/parallel/shared_input.hpp),
  // and the level is the same: the norm before them then allocates its input gradient beside the projections' (their
  // dy kept in their stashes until W): measured to the byte, e2e SequenceParallel.ActivationMemoryFollowsThePlan.
  const std::int64_t mlp = std::max(t * d + 3 * t * f / tp, 3 * t * d) * b;
  const std::int64_t attention = attention_phases(block, tp, 3 * t * d, 2 * t * d, b);
  cost.backward_extra_bytes = repeated_layer_backward_extra(cost, recompute, mlp, attention, t * d * b);
  return cost;
}


// Qwen3's per-head q/k norms (BlockSpec::qk_norm), on the full sequence of this rank's heads in every layout:
// two scales [hd]; FLOPs as an RMSNorm over q and k; forward stash q and k before the norm and one f32 rstd per
// head row (rebuilt inside the backward under full recomputation); from I to W also their dy. Added to any layout's
// figures (they scale with 1 / tp, as the heads); their backward phase is attention_phases'.
void add_qk_norms(BlockCost& cost, const BlockSpec& block, std::int64_t b, Recompute recompute, int tp) {
  if (!block.qk_norm) return;
  const std::int64_t t = block.seq_len, d = block.in_features, h = block.n_heads, hd = d / h;
  const std::int64_t kv = block.n_kv_heads * hd;
  const std::int64_t cols = t * (d + kv) / tp, rstd = t * (h + block.n_kv_heads) / tp * kStatBytes;
  const double n = static_cast<double>(t * (d + kv));
  cost.param_count += 2 * hd;
  cost.replicated_param_count += 2 * hd;  // q_norm, k_norm: one head's width, on every tp rank
  cost.param_bytes += 2 * hd * b;
  cost.forward_flops += 4 * n;
  cost.input_grad_flops += 6 * n;
  cost.weight_grad_flops += 3 * n;
  if (recompute != Recompute::kFull) cost.activation_bytes += cols * b + rstd;
  // Full recomputation rebuilds their stash with the block's inside its backward (before, left out: 6,912 B under,
  // SequenceParallel.ActivationMemoryFollowsThePlan "llama qk full").
  if (recompute == Recompute::kFull) {
    cost.recompute_transient_bytes += cols * b + rstd;
    cost.backward_extra_bytes += cols * b + rstd;
  }
  cost.weight_stash_bytes += 2 * cols * b + rstd;
}

BlockCost llama_cost(const BlockSpec& block, DType dtype, Recompute recompute, int tp, bool sequence_parallel) {
  BlockCost cost = llama_cost_without_qk_norms(block, dtype, recompute, tp, sequence_parallel);
  add_qk_norms(cost, block, static_cast<std::int64_t>(dtype_size(dtype)), recompute, tp);
  return cost;
}

}  // namespace cost

namespace work {

using namespace work_parts;

// Llama block: RMSNorms, separate q/k/v projections (k, v of Hkv heads), rope + packing, grouped-query
// attention over the packed q|k|v (kv heads once), o; gate and up, SwiGLU, down. No biases.
// The first half, through the residual add fused into the second RMSNorm (llama.hpp llama_attention_work).
BlockWork attention_work(const BlockSpec& blk, D b, int tp, D micro, bool sequence_parallel, PassWork& core_forward) {
  const D t = static_cast<D>(blk.seq_len), d = static_cast<D>(blk.in_features);
  const D heads = static_cast<D>(blk.n_heads / tp), dh = d / static_cast<D>(blk.n_heads);
  const D kv = static_cast<D>(blk.n_kv_heads) * dh;  // k and v width
  const D rows = micro * t, p = tp;
  const D pairs = cost_parts::attended_pairs(blk.seq_len, blk.attention_window);
  // Sequence parallelism: the norms and residual adds run on this rank's T/tp tokens (layers/parallel/).
  const D seq = sequence_parallel && tp > 1 ? p : 1;
  BlockWork w;
  layernorm(w, rows * d / seq, b);  // RMSNorm streams like a LayerNorm
  linear(w, rows, d, d / p, blk.qkv_bias, b);
  linear(w, rows, d, kv / p, blk.qkv_bias, b);
  linear(w, rows, d, kv / p, blk.qkv_bias, b);
  const D packed = rows * (d + 2 * kv) / p;  // rope: reads q, k, v, writes qkv; backward the reverse
  w.forward.stream_bytes += (rows * (d + 2 * kv) / p + packed) * b;
  w.input_grad.stream_bytes += (rows * (d + 2 * kv) / p + packed) * b;
  w.forward.kernels += 1;
  w.input_grad.kernels += 1;
  core_forward = attention_forward(micro * heads, t, dh, b, pairs);
  w.forward += core_forward;
  w.input_grad += attention_backward(micro * heads, t, dh, b, pairs);
  if (blk.qk_norm) layernorm(w, rows * (d + kv) / p, b);  // Qwen3's per-head q/k norms
  linear(w, rows, d / p, d, false, b);
  add_norm(w, rows * d / seq, b);  // the residual add fused into the second RMSNorm (layers/residual_norm.hpp)
  return w;
}

BlockWork llama_work(const BlockSpec& blk, D b, int tp, D micro, Recompute recompute, bool sequence_parallel) {
  const D rows = micro * static_cast<D>(blk.seq_len), d = static_cast<D>(blk.in_features), p = tp;
  const D seq = sequence_parallel && tp > 1 ? p : 1;
  PassWork core_forward;
  BlockWork w = attention_work(blk, b, tp, micro, sequence_parallel, core_forward);
  swiglu(w, rows, d, static_cast<D>(blk.d_ff) / p, b);
  residual(w, rows * d / seq, b);
  if (recompute == Recompute::kSelective) w.input_grad += core_forward;
  if (recompute == Recompute::kFull) w.input_grad += w.forward;
  return w;
}

BlockWork llama_block_work(const BlockSpec& block, DType dtype, Recompute recompute, int tp, std::int64_t micro_batch,
                           bool sequence_parallel) {
  return llama_work(block, static_cast<D>(dtype_size(dtype)), tp, static_cast<D>(micro_batch), recompute,
                    sequence_parallel);
}

}  // namespace work

// The attention's region and the SwiGLU MLP's (gate|up ... down), both [T, D]; full recomputation repeats the
// forward's inside backward_input.
TpBlockComm llama_tp_comm(const BlockSpec& block, DType dtype, int /*tp*/, bool sp, Recompute recompute) {
  TpBlockComm c;
  add_llama_attention_tp_comm(c, block, dtype, sp);
  add_tp_region(c, block.seq_len * block.in_features * static_cast<std::int64_t>(dtype_size(dtype)), sp);
  if (recompute == Recompute::kFull) c.input_grad.insert(c.input_grad.begin(), c.forward.begin(), c.forward.end());
  return c;
}

std::string llama_shape_key(const BlockSpec& b) {
  return fmt::format("{} d{} h{} kv{} ff{} T{}{}", block_kind_name(b.kind), b.in_features, b.n_heads, b.n_kv_heads,
                     b.d_ff, b.seq_len, b.qk_norm ? " qk_norm" : "");
}

// One tp rank's tensors (layers/llama/llama_block.cpp): attn_norm, the attention (llama_attention_tensors), mlp_norm,
// the column-parallel gate and up, the row-parallel down.
std::vector<ParamTensor> llama_param_tensors(const BlockSpec& b, int tp) {
  const std::int64_t d = b.in_features, f = b.d_ff;
  std::vector<ParamTensor> out = {{d}};
  for (const ParamTensor& t : llama_attention_tensors(b, tp)) out.push_back(t);
  for (const std::int64_t n : {d, f / tp * d, f / tp * d, d * (f / tp)}) out.push_back({n});
  return out;
}

}  // namespace

BlockWork llama_attention_work(const BlockSpec& block, DType dtype, int tp, std::int64_t micro_batch,
                               bool sequence_parallel, PassWork& core_forward) {
  return work::attention_work(block, static_cast<work_parts::D>(dtype_size(dtype)), tp,
                              static_cast<work_parts::D>(micro_batch), sequence_parallel, core_forward);
}

void add_llama_attention_tp_comm(TpBlockComm& c, const BlockSpec& block, DType dtype, bool sequence_parallel) {
  add_tp_region(c, block.seq_len * block.in_features * static_cast<std::int64_t>(dtype_size(dtype)), sequence_parallel);
  if (block.qk_norm && !sequence_parallel) {  // layers/llama/head_rmsnorm.cpp: this rank's heads' share
    const std::int64_t head_dim = block.in_features / block.n_heads;
    for (int norm = 0; norm < 2; ++norm) {
      c.weight_grad.push_back({Collective::kAllReduce, head_dim * cost_parts::kStatBytes, TpBatching::kFixed});
    }
  }
}

std::vector<ParamTensor> llama_attention_tensors(const BlockSpec& b, int tp) {
  const std::int64_t d = b.in_features, hd = d / b.n_heads;
  const std::int64_t q = b.n_heads * hd / tp, kv = b.n_kv_heads * hd / tp;  // one tp rank's output features
  std::vector<ParamTensor> out;
  for (const std::int64_t width : {q, kv, kv}) {  // column-parallel q, k, v (Qwen2: biased)
    out.push_back({width * d});
    if (b.qkv_bias) out.push_back({width});
  }
  out.push_back({d * q});  // the row-parallel o, unbiased
  if (b.qk_norm) {  // q_norm, k_norm: one head's width, replicated
    out.push_back({hd});
    out.push_back({hd});
  }
  return out;
}

BlockRules llama_block_rules() {
  BlockRules r;
  r.kind = BlockKind::kLlamaBlock;
  r.repeated_layer = true;
  r.sequence_sharded = true;
  r.rms_norms = 2;
  r.dense_projections = true;
  r.cp_core_backward_qkv_grads = 2;
  r.cost = cost::llama_cost;
  r.work = work::llama_block_work;
  r.tp_comm = llama_tp_comm;
  r.shape_key = llama_shape_key;
  r.param_tensors = llama_param_tensors;
  return r;
}

}  // namespace cleave::partition
