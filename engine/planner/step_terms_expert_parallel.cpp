// The expert_all_to_all term and what expert parallelism changes in the others (docs/planner.md, "Expert
// parallelism"): the four all-to-alls of a block with routed experts, the busiest ep rank's extra expert compute
// (ep_imbalance), and the parameters a tp rank holds once (ep - 1) / ep of the experts live elsewhere. Invariant:
// for a block without routed experts, and at ep 1 but for the roofline's expert rows under cp (expert_imbalance_compute),
// every function here leaves the others' figures unchanged.
#include "engine/planner/step_terms.hpp"

#include <algorithm>

#include "partition/ep_costs.hpp"
#include "partition/families/moe.hpp"

namespace cleave::planner {

using partition::Collective;
using partition::Recompute;

namespace {

bool has_expert_parallelism(const TermContext& c, int b) {
  return c.choice->ep > 1 && c.plan->spec.blocks[static_cast<std::size_t>(b)].n_experts > 0;
}

// The exchange's messages priced on the profile's measured point-to-point fit (inside a node).
bool on_point_to_point_fit(const TermContext& c) {
  return c.profile->measured.p2p && c.ep_link == &c.profile->intra_node;
}

}  // namespace

double ep_all_to_all_s(const TermContext& c, double busiest_bytes, int ep) {
  if (!on_point_to_point_fit(c)) return c.collective_s(Collective::kReduceScatter, busiest_bytes, ep, *c.ep_link);
  const partition::MeasuredCosts& m = c.profile->measured;
  // The exchange itself, timed by the profile at the model's sizes over ep ranks (measure_ep_exchange): its latency
  // and slope hold what the fits below leave out (RESULTS-2026-12-01-m-ep-pricing).
  if (const partition::AlphaBeta* x = m.ep_exchange_of(ep)) return x->seconds(busiest_bytes);
  // A ping-pong moves one direction at a time; in the exchange every rank sends and receives at once (on Open MPI's
  // copy-in/copy-out shared memory each rank's core copies both ways), which the reduce-scatter over the same group
  // measured: each rank's buffer of X bytes, (ep - 1) / ep of it sent and as much received, all at once. Its slope
  // prices the bytes, the ping-pong's latency each of the ep - 1 messages (RESULTS-2026-11-30-e-ep-waits).
  if (const partition::AlphaBeta* both = m.collective(Collective::kReduceScatter, ep)) {
    return (ep - 1) * m.p2p->latency_s + busiest_bytes / both->bandwidth_Bps;
  }
  return (ep - 1) * m.p2p->seconds(busiest_bytes / ep);
}

BlockCollectives expert_all_to_all(const TermContext& c, int b) {
  BlockCollectives x;
  if (!has_expert_parallelism(c, b)) return x;
  const PlanChoice& choice = *c.choice;
  const auto& block = c.plan->spec.blocks[static_cast<std::size_t>(b)];
  const partition::EpExchangeBytes bytes =
      partition::ep_exchange_bytes(block, c.dtype, c.micro, choice.cp, choice.ep, c.ep_imbalance);
  const double pair = 2 * ep_all_to_all_s(c, bytes.busiest, choice.ep);
  const bool full = choice.recompute == Recompute::kFull;
  x.forward_s = pair;   // dispatch and combine
  x.backward_s = pair;  // their gradients
  x.rerun_s = full ? pair : 0.0;
  // The dispatch follows the count exchange with only the rows' gather between: the peers met there (its meeting is
  // count_exchange's), so of a forward's two all-to-alls only the combine is a meeting; both gradients are. Priced on
  // the point-to-point fit, none: a ping-pong's latency is a message to a peer blocked in its wait, the meeting's
  // wake-up included (measured: each all-to-all's own time, the last rank to arrive, at the fit's latency).
  const bool meet = !on_point_to_point_fit(c);
  x.meetings_forward = meet ? 1 : 0;
  x.meetings_backward = meet ? (full ? 3 : 2) : 0;
  const double each = collective_handoffs(Exchange::kAllToAll, choice.ep, c.ranks_per_core);
  x.handoffs_forward = 2 * each;
  x.handoffs_backward = (full ? 4 : 2) * each;
  x.bytes = c.micro_batches * 4 * bytes.sent_mean;
  return x;
}

EpExchangePrice ep_exchange_price(const TermContext& c, const BlockCollectives& ep, const CountExchange& counts,
                                  const SyncWait& meet, const BlockCompute& even, const BlockCompute& busiest) {
  EpExchangePrice x;
  if (ep.forward_s + ep.backward_s <= 0) return x;
  x.all_to_all_s = ep.forward_s + ep.backward_s + ep.rerun_s;
  x.meetings_s = ep_meeting_wait_s(c, ep.meetings_forward, ep.handoffs_forward) +
                 ep_meeting_wait_s(c, ep.meetings_backward, ep.handoffs_backward);
  x.count_exchange_s = counts.forward_s + counts.rerun_s;
  x.peer_wait_s = counts.wait_forward_s + counts.wait_rerun_s +
                  (meet.forward_term == StepTerm::kExpertAllToAll ? meet.forward_s : 0.0) +
                  (meet.backward_term == StepTerm::kExpertAllToAll ? meet.backward_s : 0.0);
  const double extra = (busiest.forward_s - even.forward_s) + (busiest.backward_input_s() - even.backward_input_s()) +
                       (busiest.weight_grad_s - even.weight_grad_s);
  x.imbalance_wait_s = c.core_sharing * std::max(0.0, extra);
  return x;
}

double expert_gemm_fraction(const TermContext& c, int b, double pass_flops) {
  if (!has_expert_parallelism(c, b) || pass_flops <= 0) return 0.0;
  const auto& block = c.plan->spec.blocks[static_cast<std::size_t>(b)];
  // Expert GEMMs per sample: gate, up (D -> F/tp) and down (F/tp -> D) over T·k rows, 2 FLOPs a multiply-add, the
  // same count in each pass (input gradient: dx of each; weight gradient: dW of each).
  const double expert_flops = 3.0 * 2.0 * static_cast<double>(block.seq_len * block.top_k * block.in_features) *
                              static_cast<double>(block.d_ff);
  return std::min(1.0, expert_flops / pass_flops);
}

namespace {

// On a roofline profile: the busiest rank's routed-expert kernels at their own rows, f × b · T/cp · k / E per GEMM (a cp
// rank routes its T/cp tokens), less what block_compute priced (the block at its full T, ÷ cp but its launches, which
// a cp rank makes as often as at cp 1), pass by pass: GEMMs launch by launch, the SwiGLU's traffic in elementwise; the
// launches are the same E per projection.
BlockCompute roofline_expert_rows(const TermContext& c, int b, const BlockCompute& compute) {
  const PlanChoice& choice = *c.choice;
  const HardwareProfile& profile = *c.profile;
  const auto& block = c.plan->spec.blocks[static_cast<std::size_t>(b)];
  partition::BlockSpec local = block;
  local.seq_len = block.seq_len / choice.cp;
  const partition::BlockWork priced = partition::moe_routed_expert_work(block, c.dtype, choice.tp, choice.micro_batch);
  const partition::BlockWork busiest =
      partition::moe_routed_expert_work(local, c.dtype, choice.tp, choice.micro_batch, c.ep_imbalance);
  const auto more = [&](const partition::PassWork& hi, const partition::PassWork& lo) {
    const double launch = profile.launch_seconds(lo);
    const double priced = (profile.roofline_seconds(lo, c.bf16) - launch) / choice.cp + launch;
    return profile.roofline_seconds(hi, c.bf16) - priced;
  };
  const auto more_stream = [&](const partition::PassWork& hi, const partition::PassWork& lo) {
    return profile.elementwise_seconds(hi) - profile.elementwise_seconds(lo) / choice.cp;
  };
  const auto more_launch = [&](const partition::PassWork& hi, const partition::PassWork& lo) {
    return profile.launch_seconds(hi) - profile.launch_seconds(lo);
  };
  const double rerun = choice.recompute == Recompute::kFull ? 1.0 : 0.0;
  BlockCompute x = compute;
  const auto add = [&](const partition::PassWork& hi, const partition::PassWork& lo, double& total, double& stream,
                       double& launch, double times) {
    total += times * more(hi, lo);
    stream += times * more_stream(hi, lo);
    launch += times * more_launch(hi, lo);
  };
  add(busiest.forward, priced.forward, x.forward_s, x.elementwise.forward_s, x.launch.forward_s, 1.0);
  add(busiest.input_grad, priced.input_grad, x.input_grad_s, x.elementwise.input_grad_s, x.launch.input_grad_s, 1.0);
  add(busiest.forward, priced.forward, x.recompute_s, x.elementwise.recompute_s, x.launch.recompute_s, rerun);
  add(busiest.weight_grad, priced.weight_grad, x.weight_grad_s, x.elementwise.weight_grad_s, x.launch.weight_grad_s,
      1.0);
  return x;
}

}  // namespace

BlockCompute expert_imbalance_compute(const TermContext& c, int b, const BlockCompute& compute) {
  const bool routed = c.plan->spec.blocks[static_cast<std::size_t>(b)].n_experts > 0;
  const bool roofline = !c.profile->measured.has_blocks() && c.profile->has_roofline();
  if (roofline && routed && (c.choice->ep > 1 || c.choice->cp > 1)) return roofline_expert_rows(c, b, compute);
  if (!has_expert_parallelism(c, b)) return compute;
  const auto& cost = c.costs[static_cast<std::size_t>(b)];
  const auto share = [&](double pass_flops) { return (c.ep_imbalance - 1.0) * expert_gemm_fraction(c, b, pass_flops); };
  const double f = share(cost.forward_flops), i = share(cost.input_grad_flops), w = share(cost.weight_grad_flops);
  const ProbabilitiesCompute& p = compute.probabilities;
  BlockCompute x = compute;
  x.forward_s += f * (compute.forward_s - p.forward_s);
  x.input_grad_s += i * (compute.input_grad_s - p.input_grad_s);
  x.recompute_s += i * (compute.recompute_s - p.recompute_s);
  x.weight_grad_s += w * compute.weight_grad_s;
  return x;
}

double block_local_params(const TermContext& c, int b) {
  const double params = static_cast<double>(c.costs[static_cast<std::size_t>(b)].param_count) / c.choice->tp;
  if (!has_expert_parallelism(c, b)) return params;
  const int ep = c.choice->ep;
  const auto& block = c.plan->spec.blocks[static_cast<std::size_t>(b)];
  return params - static_cast<double>(partition::expert_param_count(block)) / c.choice->tp * (ep - 1) / ep;
}

double block_expert_params(const TermContext& c, int b) {
  if (!has_expert_parallelism(c, b)) return 0.0;
  const auto& block = c.plan->spec.blocks[static_cast<std::size_t>(b)];
  return static_cast<double>(partition::expert_param_count(block)) / c.choice->tp / c.choice->ep;
}

}  // namespace cleave::planner
