// A plan's step priced for the search (estimate_plan, plan_search.hpp): the ranks' share of the node's cores and the
// profile's time sharing, the step's terms per stage (step_terms.hpp) timed by the pipeline simulator, the step, its
// bubble and throughput, the traffic, and the step split back term by term (step_breakdown.hpp); and why a measured
// profile cannot price a plan at all.
// Invariant: est.step_s is the simulated step of the very stage costs that est.breakdown splits, so the breakdown's
// terms sum to the step; a plan the profile cannot price (measured_gap) is never given a time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/config/config.hpp"
#include "engine/planner/plan_search.hpp"
#include "engine/run_plan/memory_plan.hpp"
#include "engine/run_plan/plan.hpp"

namespace cleave::planner {

// Why a measured profile cannot price the plan: it has no measurement of a block at the plan's tensor-parallel
// width; "" when it can (or has no block tables). A profile of another model is refused (check_profile_matches).
std::string measured_gap(const HardwareProfile& profile, const run_plan::Plan& plan, const PlanChoice& choice,
                         int world, bool bf16);

// Time: the step's terms per stage (step_terms.hpp) for `working_set`, timed by the simulator, then split back
// term by term into est's breakdown; `details` gets the simulated step and each rank's memory over it (the memory
// plan's on `cpu`, planned_cpu_kernels). `options` are the search's, `opts` with_ep_imbalance's.
void price_step(const run_plan::Plan& plan, const config::RunConfig& config, const PlanChoice& choice,
                const HardwareProfile& profile, const SearchOptions& options, const SearchOptions& opts,
                const std::vector<std::int64_t>& working_set, const run_plan::CpuKernels& cpu, SearchCache* cache,
                PlanEstimate& est, PlanDetails* details);

}  // namespace cleave::planner
