// See plan_pricing.hpp.
#include "engine/planner/plan_pricing.hpp"

#include <algorithm>
#include <memory>

#include <fmt/format.h>

#include "engine/planner/plan_memory.hpp"
#include "engine/planner/step_terms.hpp"
#include "engine/run_plan/memory_plan.hpp"
#include "partition/block_work.hpp"
#include "pipeline/simulator.hpp"

namespace cleave::planner {
namespace {

// Ranks sharing a node's cores: each computes on its share (HardwareProfile::core_sharing), so a layout with
// more ranks than cores is never priced faster than the cores allow.
void share_node_cores(const HardwareProfile& profile, int world, PlanEstimate& est) {
  est.ranks_on_node = std::min(world, std::max(1, profile.ranks_per_node));
  est.cores_per_node = profile.cores_per_node;
  est.core_sharing = profile.core_sharing(est.ranks_on_node);
}

// The profile's time sharing at est's ranks per node (time_shared): its compute factor, taken into core_sharing,
// and the handoff to a descheduled peer.
void share_time_slices(const HardwareProfile& profile, PlanEstimate& est) {
  const TimeShared shared = time_shared(profile, est.ranks_on_node);
  est.time_shared_compute = shared.compute;
  est.handoff_s = shared.handoff_s;
  est.core_sharing *= shared.compute;
}

// What the step moves: each rank's share of the communicated bytes, the ep imbalance priced, and one moe block's
// four all-to-alls per micro-batch (the first moe block's).
void record_traffic(const TermContext& terms, const std::vector<StageCosts>& stages, PlanEstimate& est) {
  const int pp = terms.choice->pp;
  for (const StageCosts& st : stages) {
    est.comm_bytes += st.comm_bytes / pp;
    if (est.ep_exchange.all_to_all_s == 0) est.ep_exchange = st.ep_exchange;  // the first stage with a moe block
  }
  est.ep_imbalance = terms.ep_imbalance;
  est.ep_imbalance_source = terms.ep_imbalance_source;
  est.ep_memory = run_plan::ep_memory_figures(terms.plan->spec, *terms.config, terms.options->ep_memory);
  for (int b = 0; b < static_cast<int>(terms.plan->spec.blocks.size()) && est.ep_all_to_all_s == 0; ++b) {
    const BlockCollectives x = expert_all_to_all(terms, b);  // one moe block's four, per micro-batch
    est.ep_all_to_all_s = x.forward_s + x.backward_s;
  }
}

// The simulated step, its bubble and the items it trains per second into `est`.
void record_step(const pipeline::SimulationResult& result, const config::RunConfig& config,
                 const run_plan::Plan& plan, const SearchOptions& options, PlanEstimate& est) {
  est.step_s = priced_step_s(result.stats, options);
  est.bubble = options.optimizer_post_validation ? result.stats.stage_bubble_fraction : result.stats.bubble_fraction;
  const double items = static_cast<double>(config.resolved_batch().global_batch_size * plan.spec.items_per_sample());
  est.items_per_s = est.step_s > 0 ? items / est.step_s : 0.0;
}

}  // namespace

std::string measured_gap(const HardwareProfile& profile, const run_plan::Plan& plan, const PlanChoice& choice,
                         int world, bool bf16) {
  if (!profile.measured.has_blocks()) return "";
  check_profile_matches(profile, plan.spec, bf16);
  for (const auto& block : plan.spec.blocks) {
    if (!profile.measured.covers(partition::block_shape_key(block), choice.tp)) {
      return fmt::format("profile '{}' has no measurement at tensor-parallel width {} (run cleave profile with "
                         "--world {})", profile.name, choice.tp, world);
    }
  }
  return "";
}

void price_step(const run_plan::Plan& plan, const config::RunConfig& config, const PlanChoice& choice,
                const HardwareProfile& profile, const SearchOptions& options, const SearchOptions& opts,
                const std::vector<std::int64_t>& working_set, const run_plan::CpuKernels& cpu, SearchCache* cache,
                PlanEstimate& est, PlanDetails* details) {
  share_node_cores(profile, options.world, est);
  const TermContext terms = make_term_context(plan, config, choice, profile, opts, est.core_sharing);
  share_time_slices(profile, est);
  const std::vector<StageCosts> stages = stage_costs(terms, working_set);
  ActionTerms optimizer;
  const pipeline::SimulationCosts sim = simulation_costs(terms, stages, optimizer);
  record_traffic(terms, stages, est);
  if (choice.pp > 1) est.core_holder_wait_s = core_holder_wait_s(terms.oversubscription, pipeline_mean_action_s(terms, stages));
  est.ep_core_holder_wait_s = ep_core_holder_wait_s(terms, stages);
  if (choice.tp > 1 || choice.cp > 1) est.group_core_holder_wait_s = peer_core_holder_wait_s(terms, stages);
  // In a search, the schedule validated and indexed once (SearchCache::prepared: the same timing).
  const std::shared_ptr<const pipeline::PreparedSchedule> prepared =
      cache != nullptr ? cache->prepared.prepare(plan.schedule) : nullptr;
  const pipeline::SimulationResult result =
      prepared != nullptr ? pipeline::simulate(*prepared, sim) : pipeline::simulate(plan.schedule, sim);
  record_step(result, config, plan, options, est);
  est.breakdown = step_breakdown(terms, stages, optimizer, sim, result, prepared.get());
  if (details) {
    details->simulated = result;
    memory_over_step(plan, config, opts, cpu, est.step_s, *details);
  }
}

}  // namespace cleave::planner
