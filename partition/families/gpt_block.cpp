// gpt's transformer block below the layers: its FLOPs, parameter, activation, weight-stash and backward bytes
// (block_cost), its roofline work (block_work), its tensor-parallel collectives (tp_block_comm) and the
// memory plan's widening figure, registered as transformer_block_rules() in the family table.
//
// The formulas and counting rules are cost_model.hpp's ("transformer"); the invariant kept with layers/ is
// that activation_bytes is exactly what layers/transformer_block.cpp (and its tensor-parallel and
// sequence-parallel forms in layers/parallel/) leave in the Stash for one sample.
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

Parts transformer_parts(const BlockSpec& b) {
  const std::int64_t t = b.seq_len, d = b.in_features, f = b.d_ff, h = b.n_heads;
  CLEAVE_ASSERT(t > 0 && d > 0 && f > 0 && h > 0, "transformer block {} has unset sizes", b.name);
  Parts p = layernorm(t, d);
  p += linear(t, d, 3 * d, true);
  p += attention(t, d, h);
  p += linear(t, d, d, true);
  p += residual_add(t * d);
  p += layernorm(t, d);
  p += linear(t, d, f, true);
  p += gelu(t * f);
  p += linear(t, f, d, true);
  p += residual_add(t * d);
  return p;
}

BlockCost transformer_cost(const BlockSpec& block, DType dtype, Recompute recompute, int tp, bool sequence_parallel) {
  const auto b = static_cast<std::int64_t>(dtype_size(dtype));
  BlockCost cost = base_cost(transformer_parts(block), b, block.output.numel() * b);
  const std::int64_t t = block.seq_len, d = block.in_features, f = block.d_ff, h = block.n_heads;
  // qkv (x, dy[3D]), proj (x, dy), fc1 (x, dy[F]), fc2 (x[F], dy); two LayerNorms (x, dy, mean, rstd).
  cost.weight_stash_bytes = t * (12 * d + 2 * f) * b + 4 * t * kStatBytes;
  cost.replicated_param_count = 6 * d;  // under tp: ln1, ln2 (weight, bias), proj's and fc2's biases
  recompute_repeated_layer(cost, block, recompute, b);
  if (tp > 1) {
    // One tp rank's share (cost_model.hpp): only the sharded tensors divide.
    const std::int64_t plain = (4 * t * d + (3 * t * d + t * d + 2 * t * f) / tp) * b + (h / tp) * t * kStatBytes +
                               4 * t * kStatBytes;
    cost.weight_stash_bytes = (8 * t * d + (4 * t * d + 2 * t * f) / tp) * b + 4 * t * kStatBytes;
    apply_recompute(cost, recompute, plain, attention_stats_bytes(t, h / tp), t * d * b);
  }
  if (sequence_parallel && tp > 1) {
    const std::int64_t ts = t / tp;
    // ln1 / ln2 inputs, qkv / fc1 inputs (shards), qkv [T, 3D/tp], attention output [T, D/tp], fc1 and GELU
    // outputs [T, F/tp], the attention statistics [H/tp, T] (f32), the norms' statistics of T/tp rows.
    const std::int64_t plain = (8 * t * d + 2 * t * f) / tp * b + (h / tp) * t * kStatBytes + 4 * ts * kStatBytes;
    cost.weight_stash_bytes = (2 * t * d + (12 * t * d + 2 * t * f) / tp) * b + 4 * ts * kStatBytes;
    apply_recompute(cost, recompute, plain, attention_stats_bytes(t, h / tp), ts * d * b);
    cost.output_bytes = ts * d * b;
    // backward_extra, the rise inside the block's I above the level it started at (the dy shard [T/tp, D] it is
    // given, the residual branch's gradient alive through the block's backward, counted here), per phase:
    //   mlp, GELU's backward: the dy shard, fc2's gathered dy [T, D] (kept for its W), fc2's dx dg and GELU's dh
    //     [T, F/tp];
    //   mlp, fc1's: GELU's input freed, dg still alive: the dy shard, fc2's gathered dy, dg, fc1's partial dx [T, D]
    //     and its reduce-scattered shard;
    //   attention, qkv's: the shards dy, dx1 (fc1's), dm, da [T/tp, D], fc2's gathered dy (the mlp's W stash: dh
    //     took GELU's input's place, fc2's gathered dy is new), proj's gathered dy, dout and dqkv [T, 4D/tp], qkv's
    //     partial dx [T, D].
    // Measured per micro-batch of 2 at T 32, D 32, tp 2, F 64 / 128 / 256 (SequenceParallel.
    // SplitBackwardMemoryFollowsThePlan, allocator trace): 7 / 7 / 9.5 [T, D] per sample, the attention's at 2·D and
    // 4·D, GELU's at 8·D. Before, the mlp figure counted fc1's partial dx beside dh and the attention figure left out
    // fc2's gathered dy, exact only at F = 4·D where the two errors met: 1.6% under the measured peak at F 2·D, 2.7%
    // over at 8·D.
    const std::int64_t mlp = std::max(ts * d + t * d + 2 * t * f / tp, 2 * ts * d + 2 * t * d + t * f / tp) * b;
    const std::int64_t attention = (4 * ts * d + 3 * t * d + 4 * t * d / tp) * b;
    cost.backward_extra_bytes = repeated_layer_backward_extra(cost, recompute, mlp, attention, ts * d * b);
    return cost;
  }
  const std::int64_t mlp = (2 * t * f / tp + t * d) * b;
  const std::int64_t attention = (4 * t * d + 4 * t * d / tp) * b;
  cost.backward_extra_bytes = repeated_layer_backward_extra(cost, recompute, mlp, attention, t * d * b);
  return cost;
}

}  // namespace cost

namespace work {

using namespace work_parts;

BlockWork transformer_work(const BlockSpec& blk, D b, int tp, D micro, Recompute recompute, bool sequence_parallel) {
  const D t = static_cast<D>(blk.seq_len), d = static_cast<D>(blk.in_features), f = static_cast<D>(blk.d_ff);
  const D heads = static_cast<D>(blk.n_heads / tp), dh = d / static_cast<D>(blk.n_heads);
  const D rows = micro * t, p = tp;
  const D pairs = cost_parts::attended_pairs(blk.seq_len, 0);
  // Sequence parallelism: the norms and residual adds run on this rank's T/tp tokens (layers/parallel/).
  const D seq = sequence_parallel && tp > 1 ? p : 1;
  BlockWork w;
  layernorm(w, rows * d / seq, b);
  linear(w, rows, d, 3 * d / p, true, b);
  const PassWork core_forward = attention_forward(micro * heads, t, dh, b, pairs);
  w.forward += core_forward;
  w.input_grad += attention_backward(micro * heads, t, dh, b, pairs);
  linear(w, rows, d / p, d, true, b);
  residual(w, rows * d / seq, b);
  layernorm(w, rows * d / seq, b);
  linear(w, rows, d, f / p, true, b);
  pointwise(w, rows * f / p, b);
  linear(w, rows, f / p, d, true, b);
  residual(w, rows * d / seq, b);
  if (recompute == Recompute::kSelective) w.input_grad += core_forward;
  if (recompute == Recompute::kFull) w.input_grad += w.forward;
  return w;
}

BlockWork transformer_block_work(const BlockSpec& block, DType dtype, Recompute recompute, int tp,
                                 std::int64_t micro_batch, bool sequence_parallel) {
  return transformer_work(block, static_cast<D>(dtype_size(dtype)), tp, static_cast<D>(micro_batch), recompute,
                          sequence_parallel);
}

}  // namespace work

// Two tp regions (attention: qkv ... proj; mlp: fc1 ... fc2) of [T, D] (cost_model.hpp, add_tp_region); full
// recomputation repeats the forward's inside backward_input.
TpBlockComm transformer_tp_comm(const BlockSpec& block, DType dtype, int /*tp*/, bool sp, Recompute recompute) {
  TpBlockComm c;
  const std::int64_t stream = block.seq_len * block.in_features * static_cast<std::int64_t>(dtype_size(dtype));
  add_tp_region(c, stream, sp);
  add_tp_region(c, stream, sp);
  if (recompute == Recompute::kFull) c.input_grad.insert(c.input_grad.begin(), c.forward.begin(), c.forward.end());
  return c;
}

std::string transformer_shape_key(const BlockSpec& b) {
  return fmt::format("{} d{} h{} ff{} T{}", block_kind_name(b.kind), b.in_features, b.n_heads, b.d_ff, b.seq_len);
}

// One tp rank's tensors (layers/transformer_block.cpp; tp > 1 layers/parallel/parallel_transformer_block.cpp): ln1,
// the column-parallel qkv, the row-parallel proj (its bias whole), ln2, the column-parallel fc, the row-parallel proj.
std::vector<ParamTensor> transformer_param_tensors(const BlockSpec& b, int tp) {
  const std::int64_t d = b.in_features, f = b.d_ff;
  return {{d}, {d}, {3 * d / tp * d}, {3 * d / tp}, {d * (d / tp)}, {d},
          {d}, {d}, {f / tp * d},     {f / tp},     {d * (f / tp)}, {d}};
}

// The key bias b_k (elements [D, 2D) of qkv.bias, layers/attention.cpp's q | k | v): it adds q_i · b_k to every
// score of query i, the same for every key, and the softmax over keys is invariant to that shift, so no loss
// depends on it (positions are learned embeddings added before attention; a rotary family has no such slice).
std::vector<NullGradient> transformer_null_gradients(const BlockSpec& b) {
  const std::int64_t d = b.in_features;
  return {{b.name + ".attn.qkv.bias", d, 2 * d,
           "the attention key bias: softmax over keys is invariant to the q.b_k every score of a query gets"}};
}

}  // namespace

BlockRules transformer_block_rules() {
  BlockRules r;
  r.kind = BlockKind::kTransformerBlock;
  r.repeated_layer = true;
  r.sequence_sharded = true;
  r.dense_projections = true;
  r.cost = cost::transformer_cost;
  r.work = work::transformer_block_work;
  r.tp_comm = transformer_tp_comm;
  r.shape_key = transformer_shape_key;
  r.param_tensors = transformer_param_tensors;
  r.null_gradients = transformer_null_gradients;
  r.cp_core_backward_qkv_grads = 1;
  r.cp_qkv_backward_inside_core = true;
  return r;
}

}  // namespace cleave::partition
