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
#include "engine/run_plan/memory_plan.hpp"
#include "engine/run_plan/plan.hpp"

namespace cleave::planner {

// The CPU kernels the memory plan reads for a planned run (run_plan::CpuKernels): on a cpu device the kernels' threads
// per rank as the trainer sets them (engine/train/threads.hpp: the node's cores over its ranks, at least 1; the
// profile's cores_per_node, min(world, ranks_per_node) ranks on a node), so the workspace is the attention kernel's
// per-thread scratch the run takes, not the stand-in of a block output (at T 8,192, vocab 256: the logits' 4 MiB at
// cp2 against 0.6 MiB taken); the bf16 GEMMs on the widened path (an upper bound where a CPU runs them on bf16
// kernels). Other devices: unresolved_cpu_kernels (threads 0: the block-output stand-in).
run_plan::CpuKernels planned_cpu_kernels(const config::RunConfig& config, const HardwareProfile& profile, int world);

// Memory: the trainer's own estimate for every pp rank on `cpu` (planned_cpu_kernels); the peak and the host line
// (and their ranks) into `est`, every rank's rows into `details`. Returns each rank's working set: what it touches
// over and over in a step (all of it but the optimizer state, which only the optimizer step reads), which decides
// how warm its caches stay.
std::vector<std::int64_t> estimate_memory(const run_plan::Plan& plan, const config::RunConfig& config,
                                          const PlanChoice& choice, const SearchOptions& opts,
                                          const run_plan::CpuKernels& cpu, PlanEstimate& est, PlanDetails* details);

// Whether est's peak fits under `cap` (0: none), and if not the reason, naming the rank.
void check_fit(std::int64_t cap, PlanEstimate& est);

// Memory over the step per pp rank (PlanDetails::memory_timeline), from the memory plan itself
// (run_plan::rank_stage_memory): what its total holds beside the activation walk, plus each stage's stash placed on
// the simulated timeline's actions (F adds it, I trades it for what W needs, W or a fused B frees it), each action
// holding while it runs its rise above its start: its blocks' backward peak, or an attention block's transient
// buffers (cp's K/V exchange, the CPU attention kernel's scratch) on top of what it holds then. One stage on a rank:
// the timeline peaks at the plan's total; with pipelining, below it by the boundary tensors in flight (placed by the
// plan's walk only). Before it used the cost model's stashes without cp's attention state and left the exchange
// buffers in all step and the workspace out: at T 8,192 cp2 / cp4 all_to_all 4.4-5.2% under the measured peak.
void memory_over_step(const run_plan::Plan& plan, const config::RunConfig& config, const SearchOptions& opts,
                      const run_plan::CpuKernels& cpu, double step_s, PlanDetails& details);

}  // namespace cleave::planner
