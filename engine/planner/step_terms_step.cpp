// The step as a whole: simulation_costs turns the stage costs into the simulator's inputs (with the busiest rank's
// optimizer step and ZeRO-1/2 gather, and the transfers' waits for their senders' lost time), and step_breakdown walks
// the simulated busiest rank back into terms, its idle time split into point_to_point_wait (what a simulation
// without those waits removes), point_to_point (what one with free transfers then removes) and bubble. The step is
// the makespan, or the longest per-rank span under the run's optimizer post-validation (priced_step_s).
// Invariant: the breakdown's terms sum to the simulated step (StepBreakdown.SumsToTheStep).
#include "engine/planner/step_terms.hpp"

#include <algorithm>
#include <string>

#include "engine/core/enum_names.hpp"
#include "partition/measured_costs.hpp"

namespace cleave::planner {

namespace {

bool has_send_waits(const pipeline::SimulationCosts& sim) {
  for (const auto& s : sim.stages) {
    if (s.forward_send_wait > 0 || s.backward_send_wait > 0) return true;
  }
  return false;
}

// The same costs with the transfers' waits (point_to_point_wait) taken out.
pipeline::SimulationCosts without_send_waits(pipeline::SimulationCosts sim) {
  for (auto& s : sim.stages) s.forward_send_wait = s.backward_send_wait = 0.0;
  return sim;
}

// The pp rank with the most busy time (the first of equals).
int busiest_rank(const pipeline::TimelineStats& stats) {
  int rank = 0;
  for (std::size_t r = 0; r < stats.ranks.size(); ++r) {
    if (stats.ranks[r].busy > stats.ranks[static_cast<std::size_t>(rank)].busy) rank = static_cast<int>(r);
  }
  return rank;
}

// One action's terms (its stage's F, I, W, reduction, or the optimizer step) added to `busy` and to bd's by_action.
void add_action_terms(pipeline::ActionKind kind, const StageCosts& st, const ActionTerms& optimizer, ActionTerms& busy,
                      StepBreakdown& bd) {
  const auto add = [&](StepAction action, const ActionTerms& terms) {
    busy += terms;
    bd.add_action(action, terms);
  };
  switch (kind) {
    case pipeline::ActionKind::kForward: add(StepAction::kForward, st.forward); break;
    case pipeline::ActionKind::kBackwardInput: add(StepAction::kInputGrad, st.input_grad); break;
    case pipeline::ActionKind::kBackwardWeight: add(StepAction::kWeightGrad, st.weight_grad); break;
    case pipeline::ActionKind::kBackward:
      add(StepAction::kInputGrad, st.input_grad);
      add(StepAction::kWeightGrad, st.weight_grad);
      break;
    case pipeline::ActionKind::kReduceGrad: add(StepAction::kReduceGrad, st.reduce_grad); break;
    case pipeline::ActionKind::kOptimizerStep: add(StepAction::kOptimizer, optimizer); break;
    default: break;
  }
}

// Compute per block kind: each F, I, W (B = I + W) of the stage adds its blocks' share of that pass to `blocks`.
void add_block_passes(pipeline::ActionKind kind, const StageCosts& st, std::vector<BlockPassSeconds>& blocks) {
  const bool f = kind == pipeline::ActionKind::kForward;
  const bool i = kind == pipeline::ActionKind::kBackwardInput || kind == pipeline::ActionKind::kBackward;
  const bool w = kind == pipeline::ActionKind::kBackwardWeight || kind == pipeline::ActionKind::kBackward;
  if (!f && !i && !w) return;
  for (const BlockPassSeconds& k : st.blocks) {
    BlockPassSeconds pass{k.block, 0, f ? k.forward_s : 0.0, i ? k.input_grad_s : 0.0,
                          w ? k.weight_grad_s : 0.0, i ? k.recompute_s : 0.0, {}, {}};
    for (std::size_t p : {std::size_t{kPassF}, std::size_t{kPassI}, std::size_t{kPassW}, std::size_t{kPassRerun}}) {
      const bool on = p == kPassF ? f : p == kPassW ? w : i;
      pass.elementwise_s[p] = on ? k.elementwise_s[p] : 0.0;
      pass.launch_s[p] = on ? k.launch_s[p] : 0.0;
    }
    add_block_seconds(blocks, pass);
  }
}

// The blocks pp rank `rank` holds, counted into `blocks` by kind.
void count_rank_blocks(const run_plan::Plan& plan, int rank, std::vector<BlockPassSeconds>& blocks) {
  for (int s = 0; s < plan.num_stages(); ++s) {
    if (plan.stage_to_rank(s) != rank) continue;
    const auto range = plan.partition.stages[static_cast<std::size_t>(s)];
    for (int b = range.begin; b < range.end; ++b) {
      const std::string kind(enum_name(plan.spec.blocks[static_cast<std::size_t>(b)].kind));
      for (auto& k : blocks) k.blocks += k.block == kind ? 1 : 0;
    }
  }
}

// What the F&B pairs hid of pp rank `rank`'s all-to-alls (parallel.moe_a2a_overlap, simulator.hpp): moved in `busy`
// from exposed to hidden.
void hide_paired_all_to_all(const run_plan::Plan& plan, int rank, const pipeline::SimulationCosts& sim,
                            const pipeline::SimulationResult& result, ActionTerms& busy) {
  double all_to_all = 0;
  for (const auto& a : plan.schedule.ranks[static_cast<std::size_t>(rank)]) {
    const auto s = static_cast<std::size_t>(a.stage);  // read only for F and I, which have a stage
    if (a.kind == pipeline::ActionKind::kForward) all_to_all += sim.stages[s].forward_all_to_all;
    if (pipeline::is_backward_input(a.kind)) all_to_all += sim.stages[s].backward_all_to_all;
  }
  const auto r = static_cast<std::size_t>(rank);  // kShared: what the pairs handed off still took step time
  const double hidden = std::max(0.0, all_to_all - result.exposed_all_to_all[r] - result.shared_core_all_to_all[r]);
  busy[StepTerm::kExpertAllToAll] -= hidden;
  busy.hidden_at(StepTerm::kExpertAllToAll) += hidden;
}

// Idle (the step less the rank's `busy` seconds) into bd's terms: what the receivers' waits for their senders' lost
// time add is theirs (point_to_point_wait), then what free point-to-point transfers would remove (point_to_point),
// the rest is bubble. Each is priced by simulating the schedule again without it.
void split_idle(const TermContext& c, const pipeline::SimulationCosts& sim, const pipeline::SimulationResult& result,
                const pipeline::PreparedSchedule* prepared, double busy, StepBreakdown& bd) {
  const run_plan::Plan& plan = *c.plan;
  const double step = priced_step_s(result.stats, *c.options);
  const double idle = std::max(0.0, step - busy);
  const auto priced = [&](const pipeline::SimulationCosts& costs) {
    return priced_step_s(
        (prepared != nullptr ? pipeline::simulate(*prepared, costs) : pipeline::simulate(plan.schedule, costs)).stats,
        *c.options);
  };
  const bool waits = has_send_waits(sim);
  const double waitless = waits ? priced(without_send_waits(sim)) : step;
  const double wait = std::clamp(step - waitless, 0.0, idle);
  double p2p = 0;
  if (c.choice->pp > 1 && (sim.p2p_latency > 0 || sim.p2p_bandwidth > 0)) {
    pipeline::SimulationCosts free_p2p = waits ? without_send_waits(sim) : sim;
    free_p2p.p2p_latency = 0;
    free_p2p.p2p_bandwidth = 0;  // infinite
    p2p = std::clamp(waitless - priced(free_p2p), 0.0, idle - wait);
  }
  bd.seconds[static_cast<std::size_t>(StepTerm::kPointToPointWait)] = wait;
  bd.seconds[static_cast<std::size_t>(StepTerm::kPointToPoint)] = p2p;
  bd.seconds[static_cast<std::size_t>(StepTerm::kBubble)] = std::max(0.0, idle - wait - p2p);
}

}  // namespace

pipeline::SimulationCosts simulation_costs(const TermContext& c, const std::vector<StageCosts>& stages,
                                           ActionTerms& optimizer) {
  const run_plan::Plan& plan = *c.plan;
  const int num_stages = plan.num_stages();
  pipeline::SimulationCosts sim = pipeline::SimulationCosts::uniform(num_stages, 0, 0, 0);
  std::vector<double> rank_params(static_cast<std::size_t>(c.choice->pp), 0.0);
  std::vector<double> rank_experts(static_cast<std::size_t>(c.choice->pp), 0.0);
  std::vector<double> rank_gather(static_cast<std::size_t>(c.choice->pp), 0.0);
  std::vector<double> rank_gather_hidden(static_cast<std::size_t>(c.choice->pp), 0.0);
  std::vector<int> rank_bias_layers(static_cast<std::size_t>(c.choice->pp), 0);  // routed layers with a router bias
  // More ranks than cores: what each all-to-all waits for its peers' core holders (0 where they do not outnumber them).
  const double holder = plan.schedule.overlap_fb_pairs ? ep_core_holder_wait_s(c, stages) : 0.0;
  for (int s = 0; s < num_stages; ++s) {
    const StageCosts& st = stages[static_cast<std::size_t>(s)];
    auto& sc = sim.stages[static_cast<std::size_t>(s)];
    sc.forward = st.forward.total();
    sc.backward_input = st.input_grad.total();
    if (plan.schedule.overlap_fb_pairs) {  // parallel.moe_a2a_overlap: the pairs hide the all-to-alls (simulator.hpp)
      // but not their waits for the peers' core holders: the other side's compute holds this rank's core and does not
      // put a descheduled peer on its own (measured, RESULTS-2026-12-01-b-tp-cp-cores: no gain at 4 ranks on 2 cores).
      sc.forward_all_to_all = st.forward[StepTerm::kExpertAllToAll] - holder * st.ep_meetings.all_to_alls_forward;
      sc.backward_all_to_all = st.input_grad[StepTerm::kExpertAllToAll] - holder * st.ep_meetings.all_to_alls_backward;
      sc.forward -= sc.forward_all_to_all;
      sc.backward_input -= sc.backward_all_to_all;
      // The baton's hand-over points: every all-to-all and count exchange the pass waits on.
      sc.forward_all_to_all_waits = static_cast<int>(st.ep_meetings.all_to_alls_forward + st.ep_meetings.counts_forward);
      sc.backward_all_to_all_waits =
          static_cast<int>(st.ep_meetings.all_to_alls_backward + st.ep_meetings.counts_backward);
    }
    sc.backward_weight = st.weight_grad.total();
    sc.reduce_grad = st.reduce_grad.total();
    sc.output_bytes = st.output_bytes;
    rank_params[static_cast<std::size_t>(plan.stage_to_rank(s))] += st.params;
    rank_experts[static_cast<std::size_t>(plan.stage_to_rank(s))] += st.expert_params;
    rank_gather[static_cast<std::size_t>(plan.stage_to_rank(s))] += st.step_gather_s;
    rank_gather_hidden[static_cast<std::size_t>(plan.stage_to_rank(s))] += st.step_gather_hidden_s;
    const auto range = plan.partition.stages[static_cast<std::size_t>(s)];
    for (int b = range.begin; b < range.end; ++b) {
      if (plan.spec.blocks[static_cast<std::size_t>(b)].router_bias) ++rank_bias_layers[static_cast<std::size_t>(plan.stage_to_rank(s))];
    }
  }
  // The busiest rank's update; ZeRO-1/2's all-gather of the updated parameters follows it on every rank.
  optimizer = ActionTerms{};
  double busiest_update = 0;
  for (std::size_t r = 0; r < rank_params.size(); ++r) {
    busiest_update = std::max(busiest_update, optimizer_step_s(c, rank_params[r], rank_experts[r]) +
                                                  router_bias_update_s(c, rank_bias_layers[r]));
  }
  optimizer[StepTerm::kOptimizer] = busiest_update;
  const auto slowest = std::max_element(rank_gather.begin(), rank_gather.end());
  optimizer[StepTerm::kZeroGather] = *slowest;
  optimizer.hidden_at(StepTerm::kZeroGather) = rank_gather_hidden[static_cast<std::size_t>(slowest - rank_gather.begin())];
  sim.optimizer_step = optimizer.total();
  const std::vector<SendWait> waits = point_to_point_sync_wait(c, stages);  // transfers as two-rank meetings
  for (std::size_t s = 0; s < waits.size(); ++s) {
    sim.stages[s].forward_send_wait = waits[s].forward_s;
    sim.stages[s].backward_send_wait = waits[s].backward_s;
  }
  sim.p2p_latency = c.choice->pp > 1 ? c.p2p_link->latency_s : 0.0;
  sim.p2p_bandwidth = c.p2p_link->bandwidth_Bps;
  // More ranks than cores: a waiting rank's core runs a co-runner, so what the pairs hide buys no step time.
  if (plan.schedule.overlap_fb_pairs && c.oversubscription > 1) sim.pair_cores = pipeline::PairCores::kShared;
  sim.blocking_p2p = c.options->blocking_p2p;
  sim.blocking_fb_pairs = c.options->blocking_p2p && c.choice->schedule == "interleaved_1f1b";
  const partition::MeasuredCosts& measured = c.profile->measured;
  if (measured.p2p && c.one_node && c.choice->pp > 1) {
    sim.p2p_latency = measured.p2p->latency_s;
    sim.p2p_bandwidth = measured.p2p->bandwidth_Bps;
  }
  return sim;
}

double priced_step_s(const pipeline::TimelineStats& stats, const SearchOptions& options) {
  return options.optimizer_post_validation ? stats.longest_span : stats.makespan;
}

StepBreakdown step_breakdown(const TermContext& c, const std::vector<StageCosts>& stages, const ActionTerms& optimizer,
                             const pipeline::SimulationCosts& sim, const pipeline::SimulationResult& result,
                             const pipeline::PreparedSchedule* prepared) {
  const run_plan::Plan& plan = *c.plan;
  StepBreakdown bd;
  bd.rank = busiest_rank(result.stats);
  ActionTerms busy;
  for (const auto& a : plan.schedule.ranks[static_cast<std::size_t>(bd.rank)]) {
    const StageCosts& st = stages[static_cast<std::size_t>(std::max(0, a.stage))];
    add_action_terms(a.kind, st, optimizer, busy, bd);
    add_block_passes(a.kind, st, bd.blocks);
  }
  count_rank_blocks(plan, bd.rank, bd.blocks);
  if (plan.schedule.overlap_fb_pairs) hide_paired_all_to_all(plan, bd.rank, sim, result, busy);
  bd.seconds = busy.exposed;
  bd.hidden = busy.hidden;
  split_idle(c, sim, result, prepared, busy.total(), bd);
  bd.set_groups();
  return bd;
}

}  // namespace cleave::planner
