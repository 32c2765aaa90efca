// The mixture-of-experts feed-forward (see moe_mlp.hpp).
#include "layers/moe/moe_mlp.hpp"

#include <algorithm>
#include <chrono>
#include <span>

#include "kernels/ops/ops.hpp"
#include "layers/comm_wait.hpp"
#include "layers/layer_util.hpp"
#include "layers/moe/all_to_all_timer.hpp"
#include "layers/moe/balance_exchange.hpp"
#include "layers/moe/expert_dispatch.hpp"
#include "layers/moe/forced_routing.hpp"
#include "layers/moe/router_log.hpp"
#include "layers/moe/routing_host.hpp"
#include "layers/parallel/shard.hpp"
#include "layers/parallel/sharded_param.hpp"
#include "layers/parallel/tp_util.hpp"

namespace cleave::layers {
namespace {

enum Slot : std::size_t {
  kX, kLogits, kXp, kG, kU, kH, kO, kRowToken, kTokenRow, kWeight, kRowWeight, kPlan, kBalanceSums, kBalanceStaging,
  kLogitsHost, kBiasHost, kRowTokenStaging, kTokenRowStaging, kWeightStaging, kRowWeightStaging, kNumSlots
};
enum BackSlot : std::size_t { kBX, kBDlogits, kBXp, kBDg, kBDu, kBDo, kBH, kBCounts, kBPlan };

using Blocks = std::vector<std::pair<std::int64_t, std::span<const std::int64_t>>>;  // (first row, groups) per source

// The rows of one block (its groups' sum), and of all blocks.
std::int64_t rows_of_groups(std::span<const std::int64_t> groups) {
  std::int64_t n = 0;
  for (std::int64_t g : groups) n += g;
  return n;
}

std::int64_t rows_of_blocks(const Blocks& blocks) {
  std::int64_t n = 0;
  for (const auto& [first, groups] : blocks) n += rows_of_groups(groups);
  return n;
}

// What the backward routes from: the forward's host copies of the logits and the bias, kept in the stash on a GPU
// (host memory, so the backward reads nothing back for its routing); on the CPU the stash's logits and the bias
// are host memory already, read in place (the same bytes, so the same routing).
struct HostRouting {
  Tensor logits, bias;
};

// model.forced_routing (test/benchmark only): the workload's experts [tokens · k] for this micro-batch's `tokens`
// (`local_tokens` per sample) at this step. The workload is a function of a token's index in the whole micro-batch
// (sample · seq_len + position), so a context-parallel rank takes the rows of its own tokens' global positions.
std::vector<std::int32_t> forced_for_tokens(const RouterOptions& router, const Context& ctx, std::int64_t tokens,
                                            std::int64_t local_tokens) {
  const std::int64_t e = router.experts, k = router.top_k;
  if (!ctx.cp.active()) return forced_experts(router.forced, ctx.step, tokens, e, k);
  const std::int64_t samples = tokens / local_tokens, seq = local_tokens * ctx.cp.size;
  const std::vector<std::int32_t> whole = forced_experts(router.forced, ctx.step, samples * seq, e, k);
  if (whole.empty()) return whole;
  std::vector<std::int32_t> out(static_cast<std::size_t>(tokens * k));
  for (std::int64_t s = 0; s < samples; ++s) {
    for (const CpSegment& run : ctx.cp.segments(local_tokens)) {
      std::copy_n(whole.begin() + (s * seq + run.global_begin) * k, run.length * k,
                  out.begin() + (s * local_tokens + run.local_begin) * k);
    }
  }
  return out;
}

// The stash's view of the count exchange (balance_exchange.hpp) and back: its buffers in two slots, its Work the
// stash's only exchange in flight.
void stash_balance(Stash& stash, const BalanceExchange& x) {
  if (x.work != nullptr) stash.in_flight = {x.work};
}

BalanceExchange stashed_balance(const Stash& stash) {
  if (!stash.tensors[kBalanceSums].defined()) return {};
  CLEAVE_ASSERT(stash.in_flight.size() == 1, "moe stash: a count buffer without its exchange");
  return {stash.tensors[kBalanceSums], stash.tensors[kBalanceStaging], stash.in_flight.front()};
}

// Context parallelism: the aux loss's f_e from the whole micro-batch's counts (router.hpp balance_over), once the
// exchange the forward posted has completed; nothing when none was posted (cp 1, or the aux loss off).
void apply_balance(Routing& routing, const Stash& stash, const RouterOptions& router, Context& ctx) {
  const BalanceExchange x = stashed_balance(stash);
  if (x.work == nullptr) return;
  const SequenceBalance whole = finish_balance_exchange(x, routing.experts, ctx);
  balance_over(routing, whole.counts, whole.tokens, router);
}

Tensor rows_of(const Tensor& t) { return t.view(Shape{t.numel() / t.shape().last(), t.shape().last()}); }

// Under ep: dispatch_rows or combine_rows inside the all-to-all timers (the router log's exposed all-to-all time and
// --explain's expert_all_to_all row). `plan`: the micro-batch's (the layer's host_.plan, read back by blocks_of).
// `exchange()` makes the call.
template <typename Exchange>
Tensor timed_exchange(const std::string& block, AllToAllKind kind, Context& ctx, Exchange exchange) {
  const AllToAllTimer timer(ctx, block, kind);
  const CommWaitTimer wait_timer(ctx, CommKind::kExpertAllToAll);
  return exchange();
}

// Sequence parallelism: which of the n routed rows of `full` (all-gathered, t tokens per sample) are this tp rank's
// own tokens.
std::vector<bool> tokens_of_rank(const Tensor& full, std::int64_t n, int tp_size, int tp_rank) {
  const std::int64_t t = full.dim(full.rank() - 2), local = t / tp_size;
  std::vector<bool> mine(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) mine[static_cast<std::size_t>(i)] = (i % t) / local == tp_rank;
  return mine;
}

std::shared_ptr<Param> expert_param(const std::string& name, const Shape& logical, int dim, std::int64_t fan_in,
                                    const ParamInit& init, int tp_size, int tp_rank) {
  auto p = make_sharded_param(name, tp_size > 1 ? make_shard_spec(logical, dim, tp_size, tp_rank) : replicated_spec(logical),
                              true, init.allocator);
  init_shard_weight(*p, fan_in, init);
  return p;
}

}  // namespace

MoeMlp::MoeMlp(std::string prefix, std::int64_t d, std::int64_t f, const RouterOptions& router, LayerPtr shared,
               const ParamInit& init, int tp_size, int tp_rank, int ep_size, int ep_rank)
    : prefix_(std::move(prefix)), block_(prefix_.substr(0, prefix_.rfind('.'))), d_(d), router_(router),
      tp_size_(tp_size), tp_rank_(tp_rank), ep_size_(ep_size), ep_rank_(ep_rank), shared_(std::move(shared)) {
  check_tp_coordinates(tp_size, tp_rank, who());
  CLEAVE_ASSERT(d > 0 && f > 0 && f % tp_size == 0 && router.experts > 0 && router.top_k > 0 &&
                    router.top_k <= router.experts,
                "{}: d {} f {} experts {} top_k {} tp {}", who(), d, f, router.experts, router.top_k, tp_size);
  f_local_ = f / tp_size;
  const std::int64_t e = router.experts;
  CLEAVE_ASSERT(ep_size >= 1 && ep_rank >= 0 && ep_rank < ep_size && e % ep_size == 0,
                "{}: {} experts over ep {} (rank {})", who(), e, ep_size, ep_rank);
  local_experts_ = e / ep_size;
  // Built in parameter order (router, experts, shared), the same on every layout.
  router_weight_ = make_sharded_param(prefix_ + ".router.weight", replicated_spec(Shape{e, d}), true, init.allocator);
  init_shard_weight(*router_weight_, d, init);
  if (router.kind == partition::RouterKind::kSigmoid) {
    router_bias_ = make_sharded_param(prefix_ + ".router.bias", replicated_spec(Shape{e}), false, init.allocator);
    router_bias_->value.zero_();
  }
  if (ep_size > 1) {  // this rank's experts: dim 0 in ep contiguous parts (each element drawn at its logical index),
                     // each expert's F split over tp as without ep (ep × tp: ShardSpec::ep_parts)
    const auto ep_param = [&](const std::string& name, const Shape& logical, std::int64_t fan_in, int tp_dim) {
      const ShardSpec spec =
          tp_size > 1 ? with_expert_split(make_shard_spec(logical, tp_dim, tp_size, tp_rank), ep_size, ep_rank)
                      : make_shard_spec(logical, 0, ep_size, ep_rank);
      auto p = make_sharded_param(name, spec, true, init.allocator);
      init_shard_weight(*p, fan_in, init);
      p->ep_size = ep_size;
      return p;
    };
    gate_ = ep_param(prefix_ + ".experts.gate.weight", Shape{e, f, d}, d, 1);
    up_ = ep_param(prefix_ + ".experts.up.weight", Shape{e, f, d}, d, 1);
    down_ = ep_param(prefix_ + ".experts.down.weight", Shape{e, d, f}, f, 2);
  } else {
    gate_ = expert_param(prefix_ + ".experts.gate.weight", Shape{e, f, d}, 1, d, init, tp_size, tp_rank);
    up_ = expert_param(prefix_ + ".experts.up.weight", Shape{e, f, d}, 1, d, init, tp_size, tp_rank);
    down_ = expert_param(prefix_ + ".experts.down.weight", Shape{e, d, f}, 2, f, init, tp_size, tp_rank);
  }
}

bool MoeMlp::expert_parallel(const Context& ctx) const {
  if (ep_size_ == 1) return false;
  CLEAVE_CHECK(ctx.ep_comm != nullptr && ctx.ep_comm->size() == ep_size_ && ctx.ep_comm->rank() == ep_rank_,
               "{}: built for ep rank {} of {} but the context's ep group is {}", who(), ep_rank_, ep_size_,
               ctx.ep_comm ? fmt::format("rank {} of {}", ctx.ep_comm->rank(), ctx.ep_comm->size()) : "missing");
  return true;
}

void MoeMlp::grouped(Context& ctx, const Tensor& a, const Tensor& b, const Tensor& c, const Blocks& blocks, bool trans_b,
                     float beta) const {
  ops::GroupedGemmOptions options;
  options.trans_b = trans_b;
  options.beta = beta;
  for (const auto& [first, groups] : blocks) {
    const std::int64_t rows = rows_of_groups(groups);
    if (rows > 0) ops::grouped_gemm(ctx, a.slice(first, first + rows), b, c.slice(first, first + rows), groups, options);
  }
}

const Routing& MoeMlp::route_stashed(const Tensor& logits, const Tensor& bias, const Tensor& full, Context& ctx) {
  const std::vector<std::int32_t> forced =  // empty (no allocation) unless model.forced_routing is set
      forced_for_tokens(router_, ctx, logits.dim(0), full.dim(full.rank() - 2));
  route_into(host_.routing, host_.router, host_floats(logits, host_.logits),
             bias.defined() ? host_floats(bias, host_.bias) : std::span<const float>(), router_, forced);
  return host_.routing;
}

const MoeMlp::Blocks& MoeMlp::blocks_of(std::span<const std::int64_t> counts, const Tensor& plan_tensor) {
  // At ep 1 one block (all routed rows, E groups); under ep one per source rank (its received rows, El groups), so
  // each GEMM has the rows and shape it has at ep 1.
  Blocks& blocks = host_.blocks;
  blocks.clear();  // keeps the capacity
  if (!plan_tensor.defined()) {
    blocks.emplace_back(0, counts);
    return blocks;
  }
  plan_from_tensor_into(plan_tensor, host_.plan);
  for (int p = 0; p < host_.plan.ep_size; ++p) {
    blocks.emplace_back(host_.plan.first_row_from(p), host_.plan.counts_from(p));
  }
  return blocks;
}

Tensor MoeMlp::forward(const Tensor& x, Stash& stash, Context& ctx) {
  check_input(ctx, x, DType::kF32, d_, 2, who());
  stash.reset(1);
  const bool sp = sequence_parallel(ctx, tp_size_);
  const bool ep = expert_parallel(ctx);
  tp_group(ctx, tp_size_, tp_rank_, who());
  const Tensor full = sp ? sequence_all_gather(x, ctx, tp_size_, tp_rank_, who()) : x;
  const Tensor xf = rows_of(full);
  const std::int64_t n = xf.dim(0), e = router_.experts, k = router_.top_k, r = n * k;
  Tensor logits = new_activation(ctx, Shape{n, e}, DType::kF32);
  ops::GemmOptions nt;
  nt.trans_b = true;
  ops::gemm(ctx, xf, router_weight_->compute(), logits, nt);
  const Tensor logits_host = ops::to_host(ctx, logits);
  const Tensor bias_host = router_bias_ ? ops::to_host(ctx, router_bias_->compute()) : Tensor();
  const Routing& routing = route_stashed(logits_host, bias_host, full, ctx);
  // Posted now, waited for in backward_input: the forward's outputs do not depend on it, and a forward no backward
  // follows (recomputation's first, evaluation's) posts none (balance_exchange.hpp).
  const BalanceExchange balance =
      stash.backward_follows ? post_balance_exchange(routing, n / full.dim(full.rank() - 2), router_, ctx)
                             : BalanceExchange{};

  const RoutingTensors up = upload_routing(ctx, routing, stash.backward_follows);  // staging: GPU only
  Tensor xp = new_activation(ctx, Shape{r, d_});
  ops::moe_gather(ctx, xf, up.row_token, Tensor(), xp);
  // Under ep the rows go to their experts' ranks (counts exchanged first); this rank's experts run on what arrives.
  Tensor plan_tensor;
  if (ep) {
    // plan_dispatch reads the exchanged counts back, a host wait for everything queued on the stream before them
    // (on a GPU: the routing uploads and the gather above). Wait for that queued compute here, outside both
    // timers, so the expert_all_to_all row and the router log's all-to-all time hold the count exchange and the
    // dispatch only (docs/cuda.md, "Wait timing"). A GPU only: CPU work has finished when its call returns.
    if (!ctx.device.is_cpu()) ops::synchronize(ctx);
    const CommWaitTimer wait_timer(ctx, CommKind::kExpertAllToAll);  // --explain's expert_all_to_all row
    {  // the router log times the two apart: the count exchange meets the peers first
      const AllToAllTimer timer(ctx, block_, AllToAllKind::kCountExchange);
      plan_dispatch_into(routing.counts, ctx, host_.plan);
    }
    plan_tensor = plan_to_tensor(host_.plan);
    const AllToAllTimer timer(ctx, block_, AllToAllKind::kDispatch);
    row_capacity_ = std::max(row_capacity_, host_.plan.received());  // the largest seen (moe_mlp.hpp)
    xp = dispatch_rows(xp, host_.plan, ctx, row_capacity_);
  }
  const Blocks& blocks = blocks_of(routing.counts, plan_tensor);
  ExpertActivations act = experts_forward(ctx, xp, blocks);
  // Under ep, back into this rank's routed-row layout (the experts' output rows are released here).
  if (ep) {
    act.o = timed_exchange(block_, AllToAllKind::kCombine, ctx, [&] { return combine_rows(act.o, host_.plan, ctx); });
  }
  Tensor y_full = new_activation(ctx, full.shape());
  ops::moe_combine(ctx, act.o, up.token_row, up.weight, rows_of(y_full));
  Tensor y = reduce_over_tp(y_full, sp, ctx);
  if (shared_) ops::add_inplace(ctx, y, shared_->forward(x, stash.children[0], ctx));
  const bool on_host = ctx.device.is_cpu();  // the CPU's stash holds host tensors already (HostRouting)
  stash.tensors = {full, logits, xp, act.g, act.u, act.h, act.o, up.row_token, up.token_row, up.weight,
                   up.row_weight, plan_tensor, balance.sums, balance.staging, on_host ? Tensor() : logits_host,
                   on_host ? Tensor() : bias_host, up.staging[0], up.staging[1], up.staging[2], up.staging[3]};
  stash_balance(stash, balance);
  return y;
}

Tensor MoeMlp::backward_input(const Tensor& dy, Stash& stash, Context& ctx) {
  CLEAVE_ASSERT(stash.tensors.size() == kNumSlots, "{}: backward_input without forward", who());
  const bool sp = sequence_parallel(ctx, tp_size_);
  const bool ep = expert_parallel(ctx);
  const Tensor full = stash.tensors[kX];
  const Tensor xf = rows_of(full);
  const std::int64_t n = xf.dim(0), e = router_.experts, k = router_.top_k, r = n * k;
  const HostRouting host = ctx.device.is_cpu()
                               ? HostRouting{stash.tensors[kLogits], router_bias_ ? router_bias_->compute() : Tensor()}
                               : HostRouting{stash.tensors[kLogitsHost], stash.tensors[kBiasHost]};
  Routing& routing = host_.routing;
  route_stashed(host.logits, host.bias, full, ctx);
  const Tensor plan_tensor = stash.tensors[kPlan];
  const Blocks& blocks = blocks_of(routing.counts, plan_tensor);
  const Tensor dy_full = sp ? sequence_all_gather(dy, ctx, tp_size_, tp_rank_, who()) : dy;
  const Tensor dyf = rows_of(dy_full);

  // The routing weights' gradient (summed over tp: each rank's expert outputs are partial sums).
  Tensor dweight = new_workspace(ctx, Shape{n, k});
  ops::moe_combine_weight_grad(ctx, dyf, stash.tensors[kO], stash.tensors[kTokenRow], dweight);
  if (tp_size_ > 1) tp_all_reduce(dweight, comm::ReduceOp::kSum, ctx, tp_size_, tp_rank_, who());

  // The experts, backwards (under ep: the output gradients travel to the experts' ranks, the input gradients back).
  Tensor d_o = new_activation(ctx, Shape{r, d_});
  ops::moe_gather(ctx, dyf, stash.tensors[kRowToken], stash.tensors[kRowWeight], d_o);
  if (ep) {
    d_o = timed_exchange(block_, AllToAllKind::kDispatchGrad, ctx,
                         [&] { return dispatch_rows(d_o, host_.plan, ctx, row_capacity_); });
  }
  ExpertGrads grads = experts_backward(ctx, d_o, stash.tensors[kG], stash.tensors[kU], blocks);
  if (ep) {
    grads.dxp = timed_exchange(block_, AllToAllKind::kCombineGrad, ctx,
                               [&] { return combine_rows(grads.dxp, host_.plan, ctx); });
  }
  Tensor dx_full = new_activation(ctx, full.shape());
  ops::moe_combine(ctx, grads.dxp, stash.tensors[kTokenRow], Tensor(), rows_of(dx_full));

  // The router: the weights' gradient and the aux and z losses', this rank's rows only where they are summed.
  const std::vector<bool> mine = sp ? tokens_of_rank(full, n, tp_size_, tp_rank_) : std::vector<bool>{};
  apply_balance(routing, stash, router_, ctx);  // the first use of the whole micro-batch's counts
  const Tensor dweight_host = ops::to_host(ctx, dweight);  // f32
  const std::span<const float> dlogits_host =
      router_backward_into(host_.router, routing, dweight_host.span<float>(), ctx.loss_scale, router_, mine);
  Tensor dlogits_f32 = upload_floats(ctx, dlogits_host, Shape{n, e});
  Tensor dlogits = new_activation(ctx, Shape{n, e});
  ops::copy(ctx, dlogits_f32, dlogits);
  if (sp || tp_rank_ == 0) {
    ops::GemmOptions acc;
    acc.beta = 1.0f;
    ops::gemm(ctx, dlogits, router_weight_->compute(), rows_of(dx_full), acc);
  }
  record_routing(routing, ep, ctx);  // host_.plan: blocks_of read the plan back

  Tensor dx = reduce_over_tp(dx_full, sp, ctx);
  if (shared_) ops::add_inplace(ctx, dx, shared_->backward_input(dy, stash.children[0], ctx));
  stash.tensors = {full, dlogits, stash.tensors[kXp], grads.dg, grads.du, d_o, stash.tensors[kH],
                   counts_to_tensor(routing.counts), plan_tensor};
  stash.in_flight.clear();  // the count exchange completed in apply_balance
  return dx;
}

Tensor MoeMlp::expert_rows(const Context& ctx, std::int64_t rows, std::int64_t width) const {
  return new_activation(ctx, Shape{std::max(rows, row_capacity_), width}).slice(0, rows);
}

MoeMlp::ExpertActivations MoeMlp::experts_forward(Context& ctx, const Tensor& xp, const Blocks& blocks) const {
  const std::int64_t rows = rows_of_blocks(blocks);
  ExpertActivations a;
  a.g = expert_rows(ctx, rows, f_local_);
  a.u = expert_rows(ctx, rows, f_local_);
  grouped(ctx, xp, gate_->compute(), a.g, blocks, true, 0.0f);
  grouped(ctx, xp, up_->compute(), a.u, blocks, true, 0.0f);
  a.h = expert_rows(ctx, rows, f_local_);
  if (rows > 0) ops::swiglu_forward(ctx, a.g, a.u, a.h);
  a.o = expert_rows(ctx, rows, d_);
  grouped(ctx, a.h, down_->compute(), a.o, blocks, true, 0.0f);
  return a;
}

MoeMlp::ExpertGrads MoeMlp::experts_backward(Context& ctx, const Tensor& d_o, const Tensor& g, const Tensor& u,
                                             const Blocks& blocks) const {
  const std::int64_t rows = rows_of_blocks(blocks);
  ExpertGrads d;
  d.dh = expert_rows(ctx, rows, f_local_);
  grouped(ctx, d_o, down_->compute(), d.dh, blocks, false, 0.0f);
  d.dg = expert_rows(ctx, rows, f_local_);
  d.du = expert_rows(ctx, rows, f_local_);
  if (rows > 0) ops::swiglu_backward(ctx, g, u, d.dh, d.dg, d.du);
  d.dxp = expert_rows(ctx, rows, d_);
  grouped(ctx, d.dg, gate_->compute(), d.dxp, blocks, false, 0.0f);
  grouped(ctx, d.du, up_->compute(), d.dxp, blocks, false, 1.0f);
  return d;
}

Tensor MoeMlp::reduce_over_tp(const Tensor& full, bool sp, Context& ctx) const {
  if (sp) return sequence_reduce_scatter(full, ctx, tp_size_, tp_rank_, who());
  if (tp_size_ > 1) tp_all_reduce(full, comm::ReduceOp::kSum, ctx, tp_size_, tp_rank_, who());
  return full;
}

void MoeMlp::record_routing(const Routing& routing, bool ep, Context& ctx) {
  stats_.counts = routing.counts;
  stats_.aux_loss = routing.aux_loss;
  stats_.z_loss = routing.z_loss;
  stats_.sent_rows.clear();
  stats_.received_rows.clear();
  if (ep) {
    stats_.sent_rows = host_.plan.send_rows;
    stats_.received_rows = host_.plan.recv_rows;
  }
  if (ctx.router_log == nullptr) return;
  ctx.router_log->add(block_, routing.counts, routing.aux_loss, routing.z_loss);
  if (ep) {
    ctx.router_log->add_dispatch(block_, stats_.sent_rows, stats_.received_rows,
                                 d_ * static_cast<std::int64_t>(dtype_size(ctx.compute_dtype())));
  }
  if (router_bias_ && router_.bias_update_rate > 0) {
    ctx.router_log->note_bias(block_, router_bias_.get(), router_.bias_update_rate);
  }
}

void MoeMlp::backward_weight(Stash& stash, Context& ctx) {
  CLEAVE_ASSERT(stash.tensors.size() == 9, "{}: backward_weight without backward_input", who());
  const std::span<const float> counts_f = stash.tensors[kBCounts].span<float>();  // a host tensor: no wait
  host_.counts.assign(counts_f.begin(), counts_f.end());
  const Blocks& blocks = blocks_of(host_.counts, stash.tensors[kBPlan]);
  ops::GroupedGemmOptions accumulate;
  accumulate.beta = 1.0f;
  // Under ep each source's rows go into its own lane when the grad holds ep lanes (deterministic mode's
  // accumulator, layer.hpp Param::ep_size), else all into the grad in source order.
  for (std::size_t s = 0; s < blocks.size(); ++s) {
    const auto& [first, groups] = blocks[s];
    const std::int64_t rows = rows_of_groups(groups);
    if (rows == 0) continue;
    const auto lane = [&](const Tensor& grad) {
      const bool lanes = blocks.size() > 1 && grad.dim(0) == static_cast<std::int64_t>(blocks.size()) * local_experts_;
      const auto b = static_cast<std::int64_t>(s);
      return lanes ? grad.slice(b * local_experts_, (b + 1) * local_experts_) : grad;
    };
    const auto part = [&](std::size_t slot) { return stash.tensors[slot].slice(first, first + rows); };
    ops::grouped_gemm_weight_grad(ctx, part(kBDg), part(kBXp), lane(gate_->grad), groups, accumulate);
    ops::grouped_gemm_weight_grad(ctx, part(kBDu), part(kBXp), lane(up_->grad), groups, accumulate);
    ops::grouped_gemm_weight_grad(ctx, part(kBDo), part(kBH), lane(down_->grad), groups, accumulate);
  }
  ops::GemmOptions tn;
  tn.trans_a = true;
  tn.beta = 1.0f;
  ops::gemm(ctx, stash.tensors[kBDlogits], rows_of(stash.tensors[kBX]), router_weight_->grad, tn);
  if (shared_) shared_->backward_weight(stash.children[0], ctx);
  stash.clear();
}

std::vector<std::shared_ptr<Param>> MoeMlp::params() const {
  std::vector<std::shared_ptr<Param>> out = {router_weight_};
  if (router_bias_) out.push_back(router_bias_);
  for (const auto& p : {gate_, up_, down_}) out.push_back(p);
  if (shared_) {
    for (auto& p : shared_->params()) out.push_back(p);
  }
  return out;
}

}  // namespace cleave::layers
