// moe's block below the layers: its FLOPs, parameter, activation, weight-stash and backward bytes (block_cost),
// its roofline work (block_work), its tensor-parallel collectives and the memory plan's widening figure,
// registered as moe_block_rules() in the family table.
//
// Exact per tp rank for the stash, with and without (gated) shared experts, with and without sequence parallelism
// (activation_bytes, and weight_stash_bytes up to the E·4 bytes of expert counts a micro-batch keeps: unit_layers
// LayerContract.MoeStashBytesMatchCostModel at tp 1, mpi_moe_stash_test_np2 at tp 2); the rest APPROXIMATE: the block is costed as llama's block (through the table's
// llama rules) with the SwiGLU width of the experts a token actually runs through, (top_k + n_shared_experts)
// · d_ff, plus what that leaves out: the parameters of the experts no token of that width runs (E - k experts)
// and of the router [E, D], the router's GEMMs (2·T·D·E per pass and weight gradient), and the stash the
// routing adds per sample (the gathered input and the experts' output, [T·k, D] each, and the f32 router
// logits [T, E]). The roofline work (moe_work) is not the active block's: llama's attention half, the shared
// experts' SwiGLU, the routed experts as the engine launches them, one GEMM per expert and projection over about
// T·k / E rows each (moe_routed_expert_work, priced launch by launch at its own size), the router's GEMM and its f32
// logits' traffic, the rows' gather and combine and their gradients (moe_routing_work).
// Uneven loads (a micro-batch whose tokens crowd into few experts) change none of the byte
// counts here, since every token always reaches exactly k experts (dropless). Under context parallelism the block
// also keeps the count exchange's row per sample, whole on every cp rank (moe_cp_whole_stash_bytes, added by the
// memory plan: engine/run_plan/cp_memory.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <string>
#include <utility>

#include "engine/core/error.hpp"
#include "partition/block_work.hpp"
#include "partition/cost_model.hpp"
#include "partition/cost_parts.hpp"
#include "partition/families/family.hpp"
#include "partition/families/moe.hpp"
#include "partition/model_spec.hpp"
#include "partition/families/llama.hpp"
#include "partition/param_tensors.hpp"
#include "partition/work_parts.hpp"

namespace cleave::partition {
namespace {

const BlockRules& llama_rules() {
  const BlockRules* rules = family_block_rules(BlockKind::kLlamaBlock);
  CLEAVE_ASSERT(rules != nullptr, "the family table has no llama block rules");
  return *rules;
}

// The llama block a token of this moe block runs through: the active SwiGLU width.
BlockSpec active_llama_block(const BlockSpec& b) {
  CLEAVE_ASSERT(b.n_experts > 0 && b.top_k > 0 && b.d_ff > 0, "moe block {} has unset sizes", b.name);
  BlockSpec l = b;
  l.kind = BlockKind::kLlamaBlock;
  l.d_ff = (b.top_k + b.n_shared_experts) * b.d_ff;
  return l;
}

// The mixture's phase of the input gradient per sample (moe_cost's comment above its call says what it holds); `cost`
// the block's cost so far (its recompute transient under full recomputation).
std::int64_t mixture_phase(const BlockSpec& block, std::int64_t b, Recompute recompute, int tp, bool sp,
                           const BlockCost& cost) {
  const std::int64_t t = block.seq_len, d = block.in_features, f = block.d_ff, e = block.n_experts, k = block.top_k;
  const std::int64_t ts = sp ? t / tp : t;
  const std::int64_t shared = block.n_shared_experts * f;
  std::int64_t mixture =
      ((sp ? ts * d + t * d : t * d) + 2 * t * k * d + 3 * t * k * f / tp + t * d + (sp ? ts * d : 0)) * b +
      t * e * (4 + b);
  if (shared > 0) {
    // Plain tp: its gate's and up's input gradients, one partial at tp > 1 (layers/parallel/shared_input.hpp).
    mixture += (sp ? std::max(t * d + 3 * t * shared / tp, 2 * t * d + ts * d)
                   : std::max(3 * t * shared / tp, (tp > 1 ? 1 : 2) * t * d)) * b;
  }
  // The gated dy the shared SwiGLU's backward reads, and the gate's logit gradient [T, 1] beside it, f32 and in the
  // compute dtype (SharedExpertGate::backward_input; before they were counted, 8 B a token under the measured peak).
  if (block.shared_expert_gate) mixture += ts * d * b + ts * (4 + b);
  if (recompute == Recompute::kFull) mixture += cost.recompute_transient_bytes - ts * d * b;
  return mixture;
}

BlockCost moe_cost(const BlockSpec& block, DType dtype, Recompute recompute, int tp, bool sequence_parallel) {
  BlockCost cost = llama_rules().cost(active_llama_block(block), dtype, recompute, tp, sequence_parallel);
  const auto b = static_cast<std::int64_t>(dtype_size(dtype));
  const std::int64_t t = block.seq_len, d = block.in_features, f = block.d_ff, e = block.n_experts, k = block.top_k;
  const std::int64_t extra_params =
      3 * d * f * (e - k) + d * e + (block.router_bias ? e : 0) + (block.shared_expert_gate ? d : 0);
  cost.param_count += extra_params;
  cost.param_bytes += extra_params * b;
  // Under tp every rank holds the router [E, D] (and its bias) and the shared experts' gate [1, D] whole: each routes
  // every token (layers/moe/router.cpp); the experts' gate, up and down are split as llama's SwiGLU.
  cost.replicated_param_count += d * e + (block.router_bias ? e : 0) + (block.shared_expert_gate ? d : 0);
  cost.inactive_param_count = 3 * d * f * (e - k);  // the experts a token is not routed to
  const double router = 2.0 * static_cast<double>(t * d * e);
  cost.forward_flops += router;
  cost.input_grad_flops += router;
  cost.weight_grad_flops += router;
  // Forward stash beyond the active llama block's: xp and o [T·k, D], the f32 logits [T, E], and the four
  // routing tables of T·k 4-byte entries (row_token, token_row int32; weight, row_weight f32).
  // Full recomputation rebuilds them inside the backward (the recompute transient the mixture's phase holds).
  std::int64_t& stash = recompute == Recompute::kFull ? cost.recompute_transient_bytes : cost.activation_bytes;
  const std::int64_t rebuilt_before = stash;
  stash += 2 * t * k * d * b + t * e * 4 + 4 * t * k * 4;
  // The shared experts' sigmoid gate (SharedExpertGate) stashes their output [T, D] and, per token, its f32
  // sigmoid and i32 row index; its weight stash is the logits' gradient [T, 1].
  const bool sp = sequence_parallel && tp > 1;
  const std::int64_t ts = sp ? t / tp : t;
  if (block.shared_expert_gate) {
    stash += ts * d * b + ts * 8;
    cost.weight_stash_bytes += ts * b;
  }
  // Weight stash beyond it: xp [T·k, D], the down projection's dy is [T·k, D] where llama's is [T, D], and
  // dlogits [T, E]; plus the E f32 counts per micro-batch, which no per-sample figure holds (E·4 bytes).
  cost.weight_stash_bytes += (t * k * d + (k - 1) * t * d + t * e) * b;
  // Shared experts: their down projection keeps its own dy [T, D] (the mixture's dy, or the gated copy of it), beside
  // the experts' d_o that the line above counts in full (unit_layers LayerContract.MoeStashBytesMatchCostModel).
  if (block.n_shared_experts > 0) cost.weight_stash_bytes += t * d * b;
  // Sequence parallelism: the mixture stashes its gathered input [T, D] (every rank routes every token), where
  // llama's column-parallel projections keep the shard.
  if (sp) stash += (t - ts) * d * b;
  // ... and shared experts keep the shard [T / tp, D] their SwiGLU (and gate) read besides: at tp 1 and under plain
  // tp it is the mixture's input itself, under sequence parallelism a tensor of its own (the plan was 3.4% under
  // the measured peak without it; e2e MoeMemory.ActivationMemoryFollowsThePlan).
  if (sp && block.n_shared_experts > 0) stash += ts * d * b;
  // The weight stash under sequence parallelism (mpi_moe_stash_test, per tp rank): the mixture keeps its gathered
  // input [T, D] where the active llama block counts the gate's shard [T / tp, D] (with shared experts the shard
  // is kept too: T·D more). No row-parallel projection here keeps its dy shard (o and a shared expert's down are
  // bias-free, as llama's), so nothing else differs.
  if (sp) cost.weight_stash_bytes += (block.n_shared_experts > 0 ? t * d : t * d - ts * d) * b;
  // The input gradient's peak is the mixture's, not a SwiGLU's of the active width: dy (and under sequence
  // parallelism its gathered copy), the experts' d_o and dxp [T·k, D], dh, dg, du [T·k, F/tp], dx [T, D] (under
  // sequence parallelism and its reduce-scattered shard [T/tp, D]), the logits' gradient [T, E] in f32 and in the
  // compute dtype, all live until the shared expert's backward (MoeMlp::backward_input), which adds its SwiGLU's:
  // dh, dg, du [T, S·F/tp] (under sequence parallelism beside down's gathered dy [T, D]), or after SwigluMlp has
  // released dh and the gate and up outputs (dg and du in their place), the input gradients: two [T, D], under
  // sequence parallelism down's gathered dy, one partial [T, D] and its shard. Measured against the allocator's
  // peak by e2e MoeMemory.ActivationMemoryFollowsThePlan: exact at tp2 with sequence parallelism, with and without
  // a shared expert, at zb_h1 and GPipe (the dx shard was missing: -0.35%; the shared SwiGLU's two phases were
  // summed: +0.08% .. +1.46%).
  // Under full recomputation the attention's phase (the active llama block's, over its own rebuilt stash) holds the
  // mixture's rebuilt stash too, less the routing tables MoeMlp::backward_input frees: the peak at top_k 1, where
  // the plan was 4.8% under without it (the peak measured in the attention core's backward; now to the byte).
  if (recompute == Recompute::kFull) cost.backward_extra_bytes += stash - rebuilt_before - 4 * t * k * 4;
  cost.backward_extra_bytes = std::max(cost.backward_extra_bytes, mixture_phase(block, b, recompute, tp, sp, cost));
  return cost;
}

// The block's kernels: llama's attention half, the shared experts' SwiGLU (every token, F·S / tp wide), the routed
// experts' grouped GEMMs (moe_routed_expert_work: E GEMMs per projection of micro · T · k / E rows each, as the
// engine launches them), the router's GEMM ([rows, D] x [D, E], replicated over tp: every rank routes every token)
// with its softmax / top-k over the f32 logits [rows, E] (read, written, and read back with their gradient in
// backward), the rows' gather into expert order and combine back with their gradients (moe_routing_work), and the
// last residual add. Under full recomputation the whole forward (the router's, gather and combine included) runs
// again in I, under selective the attention core's. Not counted: the shared expert gate's [rows, 1] GEMM and
// sigmoid.
BlockWork moe_work(const BlockSpec& block, DType dtype, Recompute recompute, int tp, std::int64_t micro_batch,
                   bool sequence_parallel) {
  using work_parts::D;
  const D rows = static_cast<D>(micro_batch * block.seq_len), d = static_cast<D>(block.in_features);
  const D e = static_cast<D>(block.n_experts), b = static_cast<D>(dtype_size(dtype)), p = tp;
  const D seq = sequence_parallel && tp > 1 ? p : 1;
  PassWork core_forward;
  BlockWork w = llama_attention_work(block, dtype, tp, micro_batch, sequence_parallel, core_forward);
  if (block.n_shared_experts > 0) {
    work_parts::swiglu(w, rows, d, static_cast<D>(block.n_shared_experts * block.d_ff) / p, b);
  }
  const BlockWork routed = moe_routed_expert_work(block, dtype, tp, micro_batch);
  const BlockWork routing = moe_routing_work(block, dtype, micro_batch);
  BlockWork router;
  work_parts::linear(router, rows, d, e, false, b);
  router.forward.stream_bytes += 2 * rows * e * 4;
  router.input_grad.stream_bytes += 3 * rows * e * 4;
  router.forward.kernels += 1;  // softmax / top-k
  router.input_grad.kernels += 1;
  for (const BlockWork* part : std::initializer_list<const BlockWork*>{&routed, &routing, &router}) {
    w.forward += part->forward;
    w.input_grad += part->input_grad;
    w.weight_grad += part->weight_grad;
  }
  work_parts::residual(w, rows * d / seq, b);
  if (recompute == Recompute::kSelective) w.input_grad += core_forward;
  if (recompute == Recompute::kFull) w.input_grad += w.forward;
  return w;
}

// llama's attention, then the mixture (layers/moe/moe_mlp.cpp): the routed experts' input all-gathered (sequence
// parallelism) and their combined output reduced over tp in F; in I dy all-gathered, the combine weights' gradient
// [T, k] (f32) all-reduced, the routed input gradient reduced; in W nothing (they keep the gathered input). The shared
// experts are a SwiGLU MLP of their own on the block's input, run after the routed ones in F and in I: one more tp
// region (add_tp_region; under sequence parallelism its input gathered again in W).
TpBlockComm moe_tp_comm(const BlockSpec& block, DType dtype, int /*tp*/, bool sp, Recompute recompute) {
  using Op = Collective;
  constexpr TpBatching kEach = TpBatching::kPerSample;
  TpBlockComm c;
  const std::int64_t stream = block.seq_len * block.in_features * static_cast<std::int64_t>(dtype_size(dtype));
  TpBlockComm shared;
  if (block.n_shared_experts > 0) add_tp_region(shared, stream, sp);
  add_llama_attention_tp_comm(c, block, dtype, sp);
  const TpCollective weights{Op::kAllReduce, block.seq_len * block.top_k * cost_parts::kStatBytes};
  std::vector<TpCollective> routed_input_grad;
  if (sp) {
    c.forward.insert(c.forward.end(), {{Op::kAllGather, stream, kEach}, {Op::kReduceScatter, stream, kEach}});
    routed_input_grad = {{Op::kAllGather, stream, kEach}, weights, {Op::kReduceScatter, stream, kEach}};
  } else {
    c.forward.push_back({Op::kAllReduce, stream});
    routed_input_grad = {weights, {Op::kAllReduce, stream}};
  }
  c.forward.insert(c.forward.end(), shared.forward.begin(), shared.forward.end());
  c.input_grad.insert(c.input_grad.begin(), shared.input_grad.begin(), shared.input_grad.end());
  c.input_grad.insert(c.input_grad.begin(), routed_input_grad.begin(), routed_input_grad.end());
  c.weight_grad.insert(c.weight_grad.end(), shared.weight_grad.begin(), shared.weight_grad.end());
  if (recompute == Recompute::kFull) c.input_grad.insert(c.input_grad.begin(), c.forward.begin(), c.forward.end());
  return c;
}

// Context parallelism's count exchange (layers/moe/balance_exchange.hpp): a row of E counts and the token count, i64,
// per sample, when the load-balancing loss is on.
std::int64_t moe_cp_whole_stash_bytes(const BlockSpec& b) { return b.aux_loss ? 8 * (b.n_experts + 1) : 0; }

// What MoeMlp::backward_input frees of the forward stash for good, before the attention's backward: the four routing
// tables (T·k 4-byte entries each, moe_cost's), the count exchange's rows (whole on every cp rank) and the f32 logits
// [T, E], less the logits' gradient [T, E] in the compute dtype it keeps in their place for the router's weight
// gradient (the same bytes in fp32). Measured at cp2 (T 32, D 32, E 4, k 2, GPipe): the core's level that much under
// the plan's before (1,104 B: 1,024 B of tables and 80 B of rows; 592 B at k 1, 1,024 B without the load-balancing
// loss); under bf16 the logits' 2 B a token and expert more (the plan 256 B over at top_k 1, where the core's phase
// is the peak, before they were counted), MoeMemory.ContextParallelFollowsThePlan.
std::int64_t moe_cp_core_backward_released_bytes(const BlockSpec& b, int cp, bool bf16) {
  const std::int64_t logits = b.seq_len * b.n_experts * 4;
  return (4 * b.seq_len * b.top_k * 4 + moe_cp_whole_stash_bytes(b) * cp + logits) * (bf16 ? 2 : 1) - logits;
}

std::string moe_shape_key(const BlockSpec& b) {
  return fmt::format("{} d{} h{} kv{} ff{} e{} k{} s{}{} T{}", block_kind_name(b.kind), b.in_features, b.n_heads,
                     b.n_kv_heads, b.d_ff, b.n_experts, b.top_k, b.n_shared_experts, b.shared_expert_gate ? "g" : "",
                     b.seq_len);
}

// One tp rank's tensors (layers/moe/moe_block.cpp, layers/moe/moe_mlp.cpp): attn_norm, llama's attention, mlp_norm,
// the router [E, D] and its sigmoid bias [E] (replicated), the routed experts' gate and up [E, F / tp, D] and down
// [E, D, F / tp], then the shared experts' column-parallel gate and up and row-parallel down of width
// n_shared_experts · F and their gate [1, D] (replicated).
std::vector<ParamTensor> moe_param_tensors(const BlockSpec& b, int tp) {
  const std::int64_t d = b.in_features, f = b.d_ff, e = b.n_experts, s = b.n_shared_experts * b.d_ff;
  std::vector<ParamTensor> out = {{d}};
  for (const ParamTensor& t : llama_attention_tensors(b, tp)) out.push_back(t);
  out.push_back({d});
  out.push_back({e * d});
  if (b.router_bias) out.push_back({e});
  for (int i = 0; i < 3; ++i) out.push_back({e * (f / tp) * d, ParamRole::kRoutedExperts});
  if (s > 0) {
    for (const std::int64_t n : {s / tp * d, s / tp * d, d * (s / tp)}) out.push_back({n});
    if (b.shared_expert_gate) out.push_back({d});
  }
  return out;
}

}  // namespace

MoeBackwardPhases moe_backward_phases(const BlockSpec& block, DType dtype, Recompute recompute, int tp,
                                      bool sequence_parallel) {
  const BlockCost cost = moe_cost(block, dtype, recompute, tp, sequence_parallel);
  // The dense phase is the attention's: the active llama block's SwiGLU is not a phase of a moe block (the mixture
  // is), so it is costed at the narrowest width (F / tp = 1), where llama's attention phase is the larger; under
  // full recomputation with the moe block's whole rebuilt stash.
  BlockSpec attention_only = active_llama_block(block);
  attention_only.d_ff = tp;
  const BlockCost dense = llama_rules().cost(attention_only, dtype, recompute, tp, sequence_parallel);
  MoeBackwardPhases p;
  p.dense = dense.backward_extra_bytes;
  if (recompute == Recompute::kFull) p.dense += cost.recompute_transient_bytes - dense.recompute_transient_bytes;
  p.mixture = mixture_phase(block, static_cast<std::int64_t>(dtype_size(dtype)), recompute, tp,
                            sequence_parallel && tp > 1, cost);
  return p;
}

BlockWork moe_routed_expert_work(const BlockSpec& block, DType dtype, int tp, std::int64_t micro_batch,
                                 double imbalance) {
  CLEAVE_ASSERT(block.n_experts > 0 && block.top_k > 0 && tp >= 1 && micro_batch >= 1 && imbalance >= 1.0,
                "moe block {}: routed experts' work at e {} k {} tp {} micro-batch {} imbalance {}", block.name,
                block.n_experts, block.top_k, tp, micro_batch, imbalance);
  using work_parts::D;
  const D e = static_cast<D>(block.n_experts), d = static_cast<D>(block.in_features);
  const D f = static_cast<D>(block.d_ff) / tp, b = static_cast<D>(dtype_size(dtype));
  const D routed = imbalance * static_cast<D>(micro_batch * block.seq_len * block.top_k);  // rows the experts run
  BlockWork one;  // one expert's three GEMMs over its mean rows, and their launches
  work_parts::linear(one, routed / e, d, f, false, b);  // gate
  work_parts::linear(one, routed / e, d, f, false, b);  // up
  work_parts::linear(one, routed / e, f, d, false, b);  // down
  BlockWork w;
  for (auto [from, to] : {std::pair{&one.forward, &w.forward}, std::pair{&one.input_grad, &w.input_grad},
                          std::pair{&one.weight_grad, &w.weight_grad}}) {
    for (Gemm g : from->gemms) {
      g.groups = e;
      to->gemms.push_back(g);
    }
    to->kernels += from->kernels * e;
  }
  w.forward.stream_bytes += 3 * routed * f * b;     // silu(gate) · up over every routed row
  w.input_grad.stream_bytes += 5 * routed * f * b;  // reads gate, up, dh, writes dgate, dup
  w.forward.kernels += 1;
  w.input_grad.kernels += 1;
  return w;
}

BlockWork moe_routing_work(const BlockSpec& block, DType dtype, std::int64_t micro_batch) {
  CLEAVE_ASSERT(block.n_experts > 0 && block.top_k > 0 && micro_batch >= 1,
                "moe block {}: routing work at e {} k {} micro-batch {}", block.name, block.n_experts, block.top_k,
                micro_batch);
  using work_parts::D;
  const D n = static_cast<D>(micro_batch * block.seq_len), d = static_cast<D>(block.in_features);
  const D r = n * static_cast<D>(block.top_k), e = static_cast<D>(block.n_experts);
  const D b = static_cast<D>(dtype_size(dtype)), index = 4;
  BlockWork w;
  w.forward.stream_bytes += 2 * r * d * b + r * index;                // gather x -> xp
  w.forward.stream_bytes += r * d * b + n * d * b + 2 * r * index;    // combine o -> y, weighted
  w.forward.kernels += 2;
  w.input_grad.stream_bytes += n * d * b + r * d * b + 2 * r * index;  // the weights' gradient
  w.input_grad.stream_bytes += 2 * r * d * b + 2 * r * index;          // gather dy -> d_o, scaled
  w.input_grad.stream_bytes += r * d * b + n * d * b + r * index;      // combine dxp -> dx
  w.input_grad.stream_bytes += n * e * (4 + b);                        // dlogits f32 -> the compute dtype
  w.input_grad.kernels += 4;
  return w;
}

BlockRules moe_block_rules() {
  BlockRules r;
  r.kind = BlockKind::kMoeBlock;
  r.repeated_layer = true;
  r.sequence_sharded = true;
  r.rms_norms = 2;
  r.cost = moe_cost;
  r.work = moe_work;
  r.tp_comm = moe_tp_comm;
  r.shape_key = moe_shape_key;
  r.param_tensors = moe_param_tensors;
  r.cp_whole_stash_bytes = moe_cp_whole_stash_bytes;
  r.cp_core_backward_qkv_grads = 2;
  r.cp_core_backward_released_bytes = moe_cp_core_backward_released_bytes;
  return r;
}

}  // namespace cleave::partition
