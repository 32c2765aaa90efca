// A plan's memory for the search (estimate_plan, plan_search.hpp): the trainer's own memory plan for every pp rank
// (engine/run_plan/memory_plan.hpp: the peak with its rank and categories, the pinned host line, each rank's working
// set), the peak checked against the cap, and each pp rank's memory over the simulated step
// (PlanDetails::memory_timeline).
// Invariant: every figure is the engine's memory plan's, or that plan's per-micro-batch stashes placed on the
// simulated timeline's actions; nothing here estimates memory a second way, so `cleave plan` and `cleave train` agree.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/planner/plan_search.hpp"
#include "engine/run_plan/plan.hpp"

namespace cleave::planner {

// Per stage, the bytes one micro-batch's forward keeps for the backward under SearchOptions::attention beyond
// memory-efficient attention (partition::attention_probabilities_work's saved_bytes; none under recomputation,
// whose rerun rebuilds them inside I).
std::vector<double> probabilities_saved(const run_plan::Plan& plan, const PlanChoice& choice, const SearchOptions& options,
                                        DType dtype);

// Memory: the trainer's own estimate for every pp rank; the peak and the host line (and their ranks) into `est`,
// every rank's rows into `details`. Returns each rank's working set: what it touches over and over in a step (all
// of it but the optimizer state, which only the optimizer step reads), which decides how warm its caches stay.
std::vector<std::int64_t> estimate_memory(const run_plan::Plan& plan, const config::RunConfig& config,
                                          const PlanChoice& choice, const SearchOptions& opts, PlanEstimate& est,
                                          PlanDetails* details);

// Whether est's peak fits under `cap` (0: none), and if not the reason, naming the rank.
void check_fit(std::int64_t cap, PlanEstimate& est);

// Memory over the step per pp rank (PlanDetails::memory_timeline): the memory plan's static categories plus the
// activations the simulated timeline holds.
void memory_over_step(const run_plan::Plan& plan, const PlanChoice& choice, bool bf16, double step_s,
                      const std::vector<double>& saved, PlanDetails& details);

}  // namespace cleave::planner
