// MoeMlp: the mixture-of-experts feed-forward of a moe block (partition/families/moe.hpp). For x [B, T, D]:
//   logits = x · router^T (f32 [N, E], N = B·T)  ->  routing on the host (router.hpp: k experts and weights per
//   token, rows grouped per expert)  ->  xp = the tokens gathered into their experts' rows [N·k, D] (moe_gather)
//   ->  per expert e: h = silu(xp_e · gate_e^T) * (xp_e · up_e^T), o_e = h · down_e^T (one grouped GEMM each,
//   ops::grouped_gemm)  ->  y[n] = Σ_j weight[n, j] · o[row of (n, j)] (moe_combine)  (+ shared(x) when the
//   block has shared experts: a SwigluMlp every token runs through, unweighted).
// Dropless: every token reaches its k experts; a group may hold 0 rows (its GEMMs are skipped).
//
// Parameters (logical names; no biases):
//   <prefix>.router.weight [E, D]            replicated; init as a projection of fan-in D
//   <prefix>.router.bias [E]                 sigmoid router only: the selection bias (no gradient, no decay)
//   <prefix>.experts.gate.weight [E, F, D]   <prefix>.experts.up.weight [E, F, D]   <prefix>.experts.down.weight [E, D, F]
//   <prefix>.shared.{gate,up,down}.weight    shared experts (SwigluMlp of width n_shared · F)
//
// Tensor parallelism (Megatron's expert tensor parallelism): every tp rank holds every expert's F / tp gate and
// up rows and down columns (ShardSpec dim 1 of gate and up, dim 2 of down), routes all N tokens itself (the
// router is replicated and its input is the same on every rank, so the routing is too), and the partial
// outputs are all-reduced (sequence parallelism: the input shard is all-gathered first and the partial output
// reduce-scattered). The gradient of the router's input is added on one rank only (tp rank 0; under sequence
// parallelism each rank adds its own tokens' rows) before the same reduction, and the router's weight
// gradient is each rank's full one (sequence parallelism: its own tokens', summed over tp by the trainer with
// the other replicated parameters). The combine's weight gradient is summed over tp before the routing's
// backward (each rank's expert outputs are partial sums).
//
// Expert parallelism (ep_size > 1, ctx.ep_comm: docs/multi-rank.md#expert-parallelism): this rank holds experts
// [ep_rank · E/ep, (ep_rank + 1) · E/ep) only (ShardSpec dim 0 of the three expert tensors, ep parts; Param::ep_size),
// still routes its own tokens over all E experts, and between the gather and the combine sends the routed rows to
// their experts' ranks and the outputs back (expert_dispatch.hpp). Its experts run on the received rows one grouped
// GEMM per source rank (the same GEMM shapes as at ep 1); the backward sends the output gradients the same way and
// returns the input gradients; the weight gradient adds each source's rows into its own lane (Param::ep_size). So
// every value is ep 1's bit for bit, and in deterministic mode the summed gradients too.
// ep × tp (expert tensor parallelism under ep): the tp ranks of an ep rank hold the same E/ep experts, each split
// over tp as above (ShardSpec::ep_parts on the tp split). The tp ranks route the same tokens (the same rows, the
// same plan), and the ep group holds one tp rank (engine/comm/process_grid.hpp), so tp rank t's rows reach the tp
// rank t of each expert's ep rank, its partial outputs (F/tp of each expert) come back, and the combined partial
// sums are all-reduced (or reduce-scattered) over tp exactly as without ep: ep × tp equals tp at ep 1 bit for bit.
//
// Auxiliary losses: the router's aux and z losses (router.hpp) add their gradients, scaled by ctx.loss_scale,
// in backward_input; their values and the per-expert counts of the last micro-batch are readable (stats()) and
// added to ctx.router_log when the run keeps one (router_log.hpp: the step's metrics).
// Routing is recomputed from the stashed logits in backward (deterministic), so a fully recomputed block
// routes exactly as its forward did.
//
// Context parallelism (ctx.cp_comm): the rank routes its part of each sequence; the aux loss's f_e is the whole
// micro-batch's, its counts summed over the cp group (router.hpp balance_over) by an all-reduce the forward posts
// (unless no backward follows it: Stash::backward_follows) and backward_input waits for just before the router's
// backward, the first use of the sum (balance_exchange.hpp: the ordering rules, recomputation, the memory it holds).
//
// Stash layout: tensors {x (all-gathered under sequence parallelism), logits, xp, g, u, h, o, row_token,
// token_row, weight, row_weight, plan, balance sums (the count exchange's buffer, i64 [B, E + 1] on ctx.allocator,
// summed in place over cp) and its host staging (a GPU only); both empty at cp 1 or without the aux loss)} and the
// exchange's Work in flight (Stash::in_flight); backward_input replaces them by {x, dlogits (compute dtype, the rows this
// rank's weight gradient counts), xp, dg, du, do, h, counts, plan}; children {shared}. Under ep, xp, g, u, h (and
// dg, du, do) are the received rows of this rank's experts, o the outputs returned to this rank's routed rows, and
// plan the dispatch plan (plan_to_tensor; an empty tensor at ep 1). counts (f32) and plan (i64) are host tensors on
// every device (read on the host: no transfer, no host wait).
//
// Host state reused from call to call (HostWorkspace below): the routing, the router's scratch, the grouped GEMMs'
// blocks and the dispatch plan read back are refilled in place by each forward, backward_input and backward_weight,
// so a steady-state step makes no host allocation for them (docs/ops.md). Each is used within one call only (no
// call reads what another left), so interleaved micro-batches (1F1B, recomputation) cannot see each other's.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "layers/layer.hpp"
#include "layers/moe/expert_dispatch.hpp"
#include "layers/moe/router.hpp"
#include "layers/param_init.hpp"

namespace cleave::layers {

struct MoeStats {
  std::vector<std::int64_t> counts;  // tokens per expert, last micro-batch routed in backward
  double aux_loss = 0.0;
  double z_loss = 0.0;
  // Expert parallelism: the routed rows this rank sent to / received from each ep rank in the last micro-batch's
  // dispatch (the combine moves the same counts back; empty at ep 1).
  std::vector<std::int64_t> sent_rows;
  std::vector<std::int64_t> received_rows;
};

class MoeMlp final : public Layer {
 public:
  // d: model width, f: each expert's width (logical), router: the kinds and sizes; shared: a SwigluMlp (or null).
  MoeMlp(std::string prefix, std::int64_t d, std::int64_t f, const RouterOptions& router, LayerPtr shared,
         const ParamInit& init, int tp_size, int tp_rank, int ep_size = 1, int ep_rank = 0);

  std::string_view kind() const override { return tp_size_ > 1 ? "parallel_moe_mlp" : "moe_mlp"; }
  Tensor forward(const Tensor& x, Stash& stash, Context& ctx) override;
  Tensor backward_input(const Tensor& dy, Stash& stash, Context& ctx) override;
  void backward_weight(Stash& stash, Context& ctx) override;
  std::vector<std::shared_ptr<Param>> params() const override;

  const MoeStats& stats() const { return stats_; }
  const RouterOptions& router_options() const { return router_; }

 private:
  const std::string& who() const { return who_; }
  std::string make_who() const { return std::string(kind()) + " " + prefix_; }
  // The routing of the host tensors `logits` [N, E] and `bias` [E] (undefined without a sigmoid router's bias)
  // into host_.routing (returned); `full` is the routed input (x, all-gathered under sequence parallelism), whose
  // shape gives the tokens per sample.
  const Routing& route_stashed(const Tensor& logits, const Tensor& bias, const Tensor& full, Context& ctx);
  bool expert_parallel(const Context& ctx) const;
  // The expert SwiGLU on rows grouped by local expert: one grouped GEMM per block of `blocks` (a source rank's
  // rows under ep; the whole at ep 1), each with that block's groups (a view of the routing's counts or of the
  // dispatch plan read back, host_.plan).
  using Blocks = std::vector<std::pair<std::int64_t, std::span<const std::int64_t>>>;  // (first row, groups)
  // The blocks of `counts` (ep 1: one block) or of the plan in `plan_tensor` (ep: one per source rank), into
  // host_.blocks (returned; valid while `counts` and host_.plan are).
  const Blocks& blocks_of(std::span<const std::int64_t> counts, const Tensor& plan_tensor);
  void grouped(Context& ctx, const Tensor& a, const Tensor& b, const Tensor& c, const Blocks& blocks, bool trans_b,
               float beta) const;
  // The experts' SwiGLU forward on the routed rows xp (this rank's received rows under ep), block by block.
  struct ExpertActivations {
    Tensor g, u, h, o;  // xp·gate^T, xp·up^T, silu(g) * u, h·down^T
  };
  // A [rows, width] activation for this rank's expert rows: the first rows of a block of row_capacity_ rows.
  Tensor expert_rows(const Context& ctx, std::int64_t rows, std::int64_t width) const;
  ExpertActivations experts_forward(Context& ctx, const Tensor& xp, const Blocks& blocks) const;
  // Its backward from the output rows' gradient d_o and the forward's g and u; dh is returned so that it lives as
  // long as the others (the layer's activation peak).
  struct ExpertGrads {
    Tensor dh, dg, du, dxp;
  };
  ExpertGrads experts_backward(Context& ctx, const Tensor& d_o, const Tensor& g, const Tensor& u,
                               const Blocks& blocks) const;
  // A block-output tensor of partial sums over tp, made whole: reduce-scattered to this rank's part of the sequence
  // under sequence parallelism, else all-reduced in place (tp > 1); returns the result.
  Tensor reduce_over_tp(const Tensor& full, bool sp, Context& ctx) const;
  // What the micro-batch routed, into stats_ and (when the run keeps one) ctx.router_log.
  void record_routing(const Routing& routing, bool ep, Context& ctx);  // under ep, host_.plan is the micro-batch's

  std::string prefix_;
  std::string block_;  // the block's name: the prefix without its last part ("blocks.3" of "blocks.3.moe")
  std::int64_t d_ = 0, f_local_ = 0;
  RouterOptions router_;
  int tp_size_ = 1, tp_rank_ = 0;
  int ep_size_ = 1, ep_rank_ = 0;
  std::int64_t local_experts_ = 0;
  std::shared_ptr<Param> router_weight_, router_bias_, gate_, up_, down_;
  LayerPtr shared_;
  MoeStats stats_;  // written by backward_input: what the last micro-batch routed (read by logs and tests)
  // Host scratch refilled by each call (see the file's comment): never read across calls.
  struct HostWorkspace {
    Routing routing;
    RouterWorkspace router;
    std::vector<float> logits, bias;    // a host tensor's values read as f32 when it is not f32 (a bf16 bias)
    std::vector<std::int64_t> counts;   // backward_weight: the stashed counts read back
    DispatchPlan plan;                  // ep: the forward's plan (plan_dispatch_into), the stashed plan read back
    Blocks blocks;
  };
  HostWorkspace host_;
  // Under ep: the rows every tensor of this rank's expert rows (the dispatch's receive, the experts' activations and
  // gradients) is allocated for: the largest received() of any micro-batch so far (grows only; at most the worst
  // case ep · R, R = tokens · k a micro-batch's routed rows, every source sending all its rows here). Each such
  // tensor is the first received() rows of a block of this many, so the allocator is asked for the same sizes every
  // step and serves them from its cache: a step takes a new block only when some micro-batch receives more rows
  // than any before it. The memory plan prices the busiest step's rows already (ep_imbalance: max over steps).
  // 0: ep 1 (the rows are R every step).
  std::int64_t row_capacity_ = 0;
  std::string who_ = make_who();  // last: built once from the members above, so no call builds a string
};

}  // namespace cleave::layers
