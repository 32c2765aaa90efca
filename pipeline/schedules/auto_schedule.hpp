// The automatic zero-bubble scheduler (Qi et al. 2023, §3: a heuristic construction searched over its
// switches, then improved; our improvement step is a local search over the order instead of their ILP).
//
// Input: pp_size ranks with one stage each, m micro-batches, per-stage F / I / W costs and P2P costs (a
// SimulationCosts table: p2p_latency + output_bytes / p2p_bandwidth per transfer), and a per-rank activation
// memory limit in *micro-batch stashes*: the number of micro-batches whose activations a rank may hold at
// once (+1 at F, −1 at W, the simulator's peak_activations). 1F1B and ZB-H1 hold p; ZB-H2 holds 2p − 1.
//
// Output: a compute schedule (F / I / W, micro-batches in increasing order per stage and kind) whose peak
// live stashes are <= the limit on every rank (weighted by weight_stash_fraction after I, below) and which the
// validator accepts.
//
// Search (all candidates timed by the same rules as simulate(); objective below, by default the makespan of
// the compute schedule with ties broken by the longest per-rank span, the zero-bubble paper's cost):
//   1. greedy construction (detail::list_schedule) over a grid of its switches (I or F first when both are
//      ready, W fill threshold or W kept for the tail, F only when it fits before the next I, per-rank forward
//      look-ahead);
//   2. the handcrafted schedules that fit the limit join as candidates: ZB-H1 (peak min(p, m)), ZB-H2 (peak
//      min(2p − 1, m)) and 1F1B with split backward. So, in the objective's sense, the result is never worse
//      than ZB-H1 when the limit is >= p, and never worse than ZB-H2 when it is >= 2p − 1;
//   3. local search on the best candidate: per-rank forward look-ahead ± 1 (re-running the construction),
//      then moving single W actions one place earlier or later on their rank, kept when the makespan (or, at
//      equal makespan, the span) shrinks and the memory limit and the dependencies still hold.
// Deterministic: no randomness; the same input gives the same schedule.
#pragma once

#include <string>

#include "pipeline/schedule.hpp"
#include "pipeline/simulator.hpp"

namespace cleave::pipeline {

// What the search minimises first (the other number breaks ties):
//   kMakespan  the step's makespan: what a step pays when the optimizer step is synchronised across ranks, as
//              in this engine (bubble_fraction's sense);
//   kSpan      the longest per-rank span, first action to last: the zero-bubble paper's cost, what a step pays
//              when steps overlap (their optimizer post-validation; stage_bubble_fraction's sense).
enum class AutoScheduleObjective { kMakespan, kSpan };

struct AutoScheduleOptions {
  SimulationCosts costs;  // one StageCost per stage (= pp_size entries); F, I, W > 0; reduce/optimizer ignored
  int memory_limit = 0;   // live micro-batch stashes per rank; 0 = pp_size (1F1B's / ZB-H1's memory)
  // What a stash still weighs between its I and its W, as a fraction of a whole one (the zero-bubble paper's
  // M_W / M_B; their Table 1 gives 32h / (34h + 5as) for a transformer layer). 1 = this engine's accounting
  // (the simulator's peak_activations counts a stash whole until its W), the default.
  double weight_stash_fraction = 1.0;
  int max_evaluations = 4000;  // budget of candidate timings for step 3
  AutoScheduleObjective objective = AutoScheduleObjective::kMakespan;
};

struct AutoScheduleResult {
  Schedule schedule;
  double makespan = 0.0;          // of the compute schedule under the given costs
  double span = 0.0;              // its longest per-rank span (first action to last)
  double greedy_makespan = 0.0;   // the best construction of step 1 alone
  std::string origin;             // which candidate step 3 started from ("greedy", "zb_h1", "zb_h2", "1f1b")
  int evaluations = 0;
};

// Throws Error for pp_size < 1, m < 1, a memory limit < 1, or a cost table of the wrong size or with costs
// that are not finite and > 0 (F, I, W) or >= 0 (P2P).
AutoScheduleResult auto_schedule(int pp_size, int num_microbatches, const AutoScheduleOptions& options);
// auto_schedule's checks alone (the same errors, in the same order), without the search: for a caller that
// refuses a schedule for another reason before paying for the search (run_plan::make_plan: more stages than blocks).
void check_auto_schedule(int pp_size, int num_microbatches, const AutoScheduleOptions& options);

// The `auto` registry entry: F = I = W = 1, no P2P cost, memory limit pp_size.
Schedule auto_schedule_uniform(int pp_size, int num_microbatches);

}  // namespace cleave::pipeline
