// A search candidate made concrete: the plan choice applied to the config, resolved on the world and planned as the
// engine runs it (run_plan::make_plan; schedule `auto` searched again on the plan's priced stage costs under
// SearchOptions::auto_schedule_priced), and the options it is priced under (the expert-parallel imbalance worked out
// once).
// Invariant: a candidate returned is one `cleave train` accepts (the engine's own config and plan code built it); one
// the engine refuses comes back as nullopt with the engine's reason, never thrown.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/config/config.hpp"
#include "engine/planner/plan_search.hpp"
#include "engine/run_plan/plan.hpp"

namespace cleave::planner {

// A candidate's config, as it runs, and its run plan.
struct PlanCandidate {
  config::RunConfig config;
  run_plan::Plan plan;
};

// `choice` applied to `base`, resolved on options.world and planned (schedule `auto` priced again under
// SearchOptions::auto_schedule_priced); nullopt with `reason` set where the engine refuses it.
std::optional<PlanCandidate> plan_candidate(const config::RunConfig& base, std::string_view origin,
                                        const std::vector<std::string>& overrides, const PlanChoice& choice,
                                        const HardwareProfile& profile, const SearchOptions& options,
                                        SearchCache* cache, std::string& reason);

// The options the candidate is priced under: with ep > 1 and no imbalance given, the default (choose_ep_imbalance:
// the profile's measured figure at the plan's ep, else the workload's expected figure, partition::workload_ep_imbalance,
// as the memory plan and the step terms would each work it out again) and its source, worked out once, with the
// search's integral (the same value).
SearchOptions with_ep_imbalance(const SearchOptions& options, const run_plan::Plan& plan, const PlanChoice& choice,
                                const HardwareProfile& profile, SearchCache* cache);

}  // namespace cleave::planner
