// What every term of a plan's step reads (TermContext, built once per plan) and the ring arithmetic the
// communication terms share. The terms themselves live one file per term or group of terms (docs/planner.md,
// "The step, term by term"; step_terms.hpp declares them all):
//   step_terms_compute.cpp           forward, input_grad, weight_grad, recompute, elementwise, kernel_launch
//   step_terms_tensor_parallel.cpp   tensor_parallel (and its overlap with compute)
//   step_terms_context_parallel.cpp  context_parallel
//   step_terms_expert_parallel.cpp   expert_all_to_all, the busiest ep rank's compute, a block's local parameters
//   step_terms_count_exchange.cpp    count_exchange (ep's counts before each dispatch, and that meeting's wait)
//   step_terms_sync_wait.cpp         the waits for peers' lost time at a pass's meetings (into tp, cp or ep's term) and
//                                    at the pipeline's transfers (point_to_point_wait)
//   step_terms_time_sharing.cpp      more ranks than cores: compute beyond the cores' share, a collective's handoffs
//   step_terms_core_holder.cpp       more ranks than cores: a pipeline transfer's, an ep / tp / cp meeting's wait
//                                    for its peers' core holders
//   step_terms_zero_gather.cpp       zero_gather (ZeRO-3's per-block gathers, ZeRO-1/2's after the step)
//   step_terms_data_parallel.cpp     data_parallel (the gradients' reduction over the replicas)
//   step_terms_settle_wait.cpp       ZeRO-2 per micro-batch, more ranks than cores: the settle's wait for peers
//   step_terms_optimizer.cpp         optimizer
//   step_terms_stage.cpp             stage_costs: the terms of every stage's F, I, W and REDUCE_GRAD
//   step_terms_step.cpp              simulation_costs and step_breakdown (point_to_point and bubble)
// Invariant: a collective is priced in one place (TermContext::collective_s), so every term sees the same link,
// measured fit or NCCL ring per node for the same group.
#include "engine/planner/step_terms.hpp"

#include <algorithm>

#include "partition/ep_costs.hpp"
#include "partition/measured_costs.hpp"

namespace cleave::planner {

using partition::Collective;
using partition::Recompute;

double ring_bytes(double bytes, int n, bool all_reduce) {
  return n <= 1 ? 0.0 : (all_reduce ? 2.0 : 1.0) * (n - 1) / n * bytes;
}

double TermContext::collective_s(Collective op, double bytes, int ranks, const Link& link) const {
  if (ranks <= 1 || bytes <= 0) return 0.0;
  if (const partition::AlphaBeta* fit = profile->measured.collective(op, ranks);
      fit != nullptr && &link == &profile->intra_node) {
    return fit->seconds(bytes);
  }
  if (&link == &profile->inter_node) {  // dp / cp groups have stride tp: ranks_per_node / tp of them on a node
    return profile->spread_collective_s(bytes, ranks, std::max(1, profile->ranks_per_node / choice->tp),
                                        op == Collective::kAllReduce);
  }
  return op == Collective::kAllReduce ? link.all_reduce_s(bytes, ranks) : link.all_reduce_s(bytes, ranks) / 2;
}

bool streams_the_step(const PlanChoice& choice, int zero, bool per_microbatch, double micro_batches) {
  const bool meets_in_passes = choice.tp > 1 || choice.cp > 1 || choice.ep > 1 || choice.pp > 1 || zero == 3;
  return !meets_in_passes && !(per_microbatch && micro_batches > 1);
}

TermContext make_term_context(const run_plan::Plan& plan, const config::RunConfig& config, const PlanChoice& choice,
                              const HardwareProfile& profile, const SearchOptions& options, double core_sharing) {
  TermContext c;
  c.plan = &plan;
  c.config = &config;
  c.choice = &choice;
  c.profile = &profile;
  c.options = &options;
  c.bf16 = config.device.precision == config::Precision::kBf16;
  c.dtype = c.bf16 ? DType::kBF16 : DType::kF32;
  c.act_bytes = static_cast<double>(dtype_size(c.dtype));
  c.micro = static_cast<double>(choice.micro_batch);
  c.micro_batches = static_cast<double>(config.resolved_batch().gradient_accumulation_steps);
  c.replicas = choice.dp * choice.cp;
  c.expert_replicas = c.replicas / std::max(1, choice.ep);
  c.zero = c.replicas > 1 ? config.optimizer.zero_stage : 0;
  c.per_microbatch = c.zero >= 2 && config::resolved_zero_reduce(config) == config::ZeroReduce::kPerMicrobatch;
  for (const auto& rank : plan.schedule.ranks) {
    for (const auto& a : rank) c.fused_backward = c.fused_backward || a.kind == pipeline::ActionKind::kBackward;
  }
  c.streams_step = streams_the_step(choice, c.zero, c.per_microbatch, c.micro_batches);
  c.compute_stretch = 1.0 + (c.streams_step ? std::max(profile.measured.compute_stretch, profile.measured.stream_stretch)
                                            : profile.measured.compute_stretch);
  const TimeShared shared = time_shared(profile, std::min(options.world, std::max(1, profile.ranks_per_node)));
  c.handoff_s = shared.handoff_s;
  c.ep_handoff_s = shared.handoff_yield_s;
  c.ranks_per_core = shared.ranks_per_core;
  const int ranks_on_node = std::min(options.world, std::max(1, profile.ranks_per_node));
  if (profile.cores_per_node > 0 && ranks_on_node > profile.cores_per_node) {
    c.oversubscription = static_cast<double>(ranks_on_node) / profile.cores_per_node;
  }
  c.core_sharing = core_sharing * c.compute_stretch * shared.compute;
  c.one_node = options.world <= profile.ranks_per_node;
  c.p2p_link = options.world > profile.ranks_per_node ? &profile.inter_node : &profile.intra_node;
  // Gradients are reduced over dp × cp ranks (ZeRO shards over them too): the replicas the tail sees.
  c.dp_link = choice.tp * choice.cp * choice.dp > profile.ranks_per_node ? &profile.inter_node : &profile.intra_node;
  c.cp_link = choice.tp * choice.cp > profile.ranks_per_node ? &profile.inter_node : &profile.intra_node;
  c.ep_link = choice.tp * choice.ep > profile.ranks_per_node ? &profile.inter_node : &profile.intra_node;
  const EpImbalance f = choice.ep > 1 && options.ep_imbalance > 0
                            ? EpImbalance{options.ep_imbalance, options.ep_imbalance_source}
                            : choose_ep_imbalance(0, profile.routing_imbalance, plan.spec, choice.micro_batch, choice.cp,
                                                  choice.ep);
  c.ep_imbalance = f.value;
  c.ep_imbalance_source = f.source;
  c.costs = partition::model_costs(plan.spec, c.dtype, choice.recompute);
  c.plain_costs = partition::model_costs(plan.spec, c.dtype, Recompute::kNone);
  return c;
}

}  // namespace cleave::planner
