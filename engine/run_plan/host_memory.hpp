// The memory plan's host line: the page-locked (pinned) host memory a rank's moe blocks stage their routing uploads
// in on a GPU (partition/families/moe_staging.hpp). Host memory, not the device's: it is not in MemoryPlan::total() nor under
// device.memory_limit, but it counts against the host's page-locked limit (ulimit -l, the driver's), so the plan
// reports it apart (MemoryPlan::host_pinned). Invariant: the walk holds each micro-batch's staging over the same
// actions the layer does (from its F to the end of its I or B; under full recomputation only inside the rerun).
#pragma once

#include <cstdint>

#include "engine/config/config.hpp"
#include "engine/run_plan/plan.hpp"

namespace cleave::run_plan {

// The peak of the pinned staging live on pp rank `pp_rank` over a step, in bytes, as if the run were on a GPU
// (the CPU stages nothing: estimate_rank_memory reports 0 there). Walks the rank's actions in schedule order:
// an F of a stage adds, per moe block of the stage and the micro-batch, its uploads and balance row, with the ep
// count exchange's 8·E on top while that block's forward dispatches; an I or B frees the stage's micro-batch
// (each block's at the end of its own backward_input, so never above what was held at the I's start). Under
// train.recompute full the first forward waits for its uploads at once (a transient of the larger of the uploads
// and the dispatch) and the rerun inside the block's I or B holds the uploads, the balance row and the dispatch.
std::int64_t host_pinned_peak(const Plan& plan, const config::RunConfig& config, int pp_rank);

}  // namespace cleave::run_plan
