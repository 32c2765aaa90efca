// See plan_candidate.hpp.
#include "engine/planner/plan_candidate.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/planner/median.hpp"
#include "engine/planner/step_terms.hpp"
#include "engine/run_plan/memory_plan.hpp"
#include "partition/ep_rules.hpp"
#include "pipeline/lowering.hpp"
#include "pipeline/schedules/auto_schedule.hpp"
#include "pipeline/simulator.hpp"

namespace cleave::planner {
namespace {

// SearchOptions::auto_schedule_priced: schedule `auto` searched again on this plan's priced stage costs (the
// median F, I, W over the stages, the priced P2P transfer after each stage) under the config's memory options;
// returns the lowered schedule. The working set per rank (which only a measured profile's warm tables read) is
// the memory plan's, less the optimizer state, as in estimate_plan.
pipeline::Schedule priced_auto_schedule(const run_plan::Plan& plan, const config::RunConfig& config,
                                        const PlanChoice& choice, const HardwareProfile& profile,
                                        const SearchOptions& options) {
  std::vector<std::int64_t> working_set(static_cast<std::size_t>(choice.pp), 0);
  // A time figure: the working set at the time model's ep imbalance (its default: the profile's measured figure at
  // this ep, else uniformly random routing), not the memory plan's bound.
  const double ep_imbalance = choose_ep_imbalance(options.ep_imbalance, profile.routing_imbalance, plan.spec,
                                                  choice.micro_batch, choice.cp, choice.ep)
                                  .value;
  for (int r = 0; r < choice.pp; ++r) {
    const run_plan::MemoryPlan memory =
        run_plan::estimate_rank_memory(plan, config, r, ep_imbalance, options.attention);
    working_set[static_cast<std::size_t>(r)] =
        memory.total() - memory.bytes[static_cast<std::size_t>(MemoryCategory::kOptimizerState)];
  }
  const double sharing = profile.core_sharing(std::min(options.world, std::max(1, profile.ranks_per_node)));
  const TermContext terms = make_term_context(plan, config, choice, profile, options, sharing);
  const std::vector<StageCosts> stages = stage_costs(terms, working_set);
  ActionTerms optimizer;
  const pipeline::SimulationCosts sim = simulation_costs(terms, stages, optimizer);
  const auto stage_median = [&](double pipeline::StageCost::*kind) {
    std::vector<double> v;
    for (const pipeline::StageCost& st : sim.stages) v.push_back(st.*kind);
    return median(v);
  };
  const int pp = choice.pp;
  pipeline::AutoScheduleOptions o;
  o.costs = pipeline::SimulationCosts::uniform(pp, stage_median(&pipeline::StageCost::forward),
                                               stage_median(&pipeline::StageCost::backward_input),
                                               stage_median(&pipeline::StageCost::backward_weight));
  o.costs.p2p_latency = sim.p2p_latency;
  o.costs.p2p_bandwidth = sim.p2p_bandwidth;
  for (std::size_t s = 0; s < o.costs.stages.size(); ++s) o.costs.stages[s].output_bytes = sim.stages[s].output_bytes;
  o.memory_limit = config.parallel.auto_schedule_memory_limit;
  o.weight_stash_fraction = config.parallel.auto_schedule_weight_stash_fraction;
  o.objective = config.parallel.auto_schedule_objective == config::AutoScheduleObjectiveChoice::kSpan
                    ? pipeline::AutoScheduleObjective::kSpan
                    : pipeline::AutoScheduleObjective::kMakespan;
  const int microbatches = static_cast<int>(config.resolved_batch().gradient_accumulation_steps);
  return pipeline::ensure_lowered(pipeline::auto_schedule(pp, microbatches, o).schedule);
}

// Where a refused key of `candidate` (choice applied to `base`) came from, as --set overrides: the command line's, then
// those of the choice that change the config (the rest restate the config's own values, so a refusal of such a key
// names the config file, as `cleave train` would). Made only for a refusal: the search makes thousands of candidates.
std::vector<std::string> origin_overrides(const config::RunConfig& base, const config::RunConfig& candidate,
                                          const std::vector<std::string>& overrides, const PlanChoice& choice) {
  const nlohmann::json before = nlohmann::json::parse(config::to_json(base));
  const nlohmann::json after = nlohmann::json::parse(config::to_json(candidate));
  std::vector<std::string> all = overrides;
  for (const std::string& o : choice.overrides()) {
    std::string pointer(1, '/');  // (not "/" + substr: GCC 12 warns a false -Wrestrict there)
    pointer.append(o, 0, o.find('='));
    std::replace(pointer.begin(), pointer.end(), '.', '/');
    const nlohmann::json::json_pointer at(pointer);
    if (!before.contains(at) || !after.contains(at) || before.at(at) != after.at(at)) all.push_back(o);
  }
  return all;
}

}  // namespace

std::optional<PlanCandidate> plan_candidate(const config::RunConfig& base, std::string_view origin,
                                        const std::vector<std::string>& overrides, const PlanChoice& choice,
                                        const HardwareProfile& profile, const SearchOptions& options,
                                        SearchCache* cache, std::string& reason) {
  PlanCandidate c;
  try {
    c.config = choice.apply_to(base);
  } catch (const ConfigKeyError& e) {
    // Worded as when the candidate was read as --set overrides: the key's origin, then the key.
    std::vector<std::string> all = overrides;
    for (auto& o : choice.overrides()) all.push_back(o);
    reason = config::keyed_message(e, origin, all);
    return std::nullopt;
  }
  const config::RunConfig applied = c.config;
  try {
    c.config.resolve_keyed(options.world);
    // The search applies its own cap (options.memory_limit, which a cap in the config already became) later:
    // a plan over it is valid but does not fit. Left in the config, make_plan would refuse it as invalid.
    c.config.device.memory_limit = 0;
    c.plan = run_plan::make_plan(c.config, static_cast<int>(c.config.resolved_batch().gradient_accumulation_steps),
                                 0, cache != nullptr ? &cache->schedules : nullptr);
    // From here on the config is the run the plan is for: the memory plan's device-only decisions (the CPU's
    // bf16 widening scratch, the host line) follow the device it runs on, not only what the config said.
    c.config.device.type = planned_device(c.config, profile);
    if (options.auto_schedule_priced && c.config.parallel.schedule == "auto") {
      c.plan.schedule = priced_auto_schedule(c.plan, c.config, choice, profile, options);
    }
  } catch (const ConfigKeyError& e) {
    // A refused key named with where it came from, as `cleave train` names it ("config FILE: key: ...").
    reason = config::keyed_message(e, origin, origin_overrides(base, applied, overrides, choice));
    return std::nullopt;
  } catch (const Error& e) {
    reason = e.what();
    return std::nullopt;
  }
  return c;
}

SearchOptions with_ep_imbalance(const SearchOptions& options, const run_plan::Plan& plan, const PlanChoice& choice,
                                const HardwareProfile& profile, SearchCache* cache) {
  SearchOptions opts = options;
  if (choice.ep > 1 && opts.ep_imbalance <= 0) {
    const EpImbalance f = choose_ep_imbalance(0, profile.routing_imbalance, plan.spec, choice.micro_batch, choice.cp,
                                              choice.ep, cache != nullptr ? &cache->expected_max : nullptr);
    opts.ep_imbalance = f.value;
    opts.ep_imbalance_source = f.source;
  }
  return opts;
}

}  // namespace cleave::planner
