// List scheduling of split-backward pipelines with one stage per rank: the construction shared by ZB-H2
// (zb_h2.cpp, unit costs) and the automatic scheduler (auto_schedule.cpp, given costs). Not a generator
// itself; both callers own their policy and say what it means.
//
// Model. Stage s runs on rank s. Time is continuous; a rank runs one action at a time. An F of micro-batch j
// may start once stage s−1's F of j has ended and its activation arrived (`transfer[s−1]` later); an I once
// stage s+1's I of j ended and its gradient arrived (the last stage: once its own F of j ended); a W any
// time after the rank's own I of j. These are exactly the simulator's rules (simulator.hpp) without the
// lowered REDUCE_GRAD / OPTIMIZER_STEP tail.
//
// Rule, each time a rank is free (all decisions at one instant are taken in rank order; prefer_forward swaps
// steps 1 and 2):
//   1. the oldest I whose gradient is there;
//   2. else the next F, if its input is there, one more stash fits memory_limit[r] (stashes between F and I
//      count 1, between I and W weight_stash_fraction) and fewer than forward_ahead[r] micro-batches are
//      between F and I; with
//      forward_fits_only, only when it ends before the gradient of the next I is known to arrive;
//   3. else the oldest pending W: at once when the memory limit blocks the next F, otherwise when the wait
//      for the next known input is at least weight_fill × the W's cost (an unknown arrival counts as
//      infinitely far); with defer_weights, only when the memory limit blocks the next F or no F is left;
//   4. else wait for the next event.
// Invariant: per stage, F, I and W each run in increasing micro-batch order; the result is a complete
// compute schedule that the validator accepts (the last stage can always run I after F, so some rank can
// always move; checked, a stall is a bug).
#pragma once

#include <vector>

#include "pipeline/action.hpp"

namespace cleave::pipeline::detail {

struct ListScheduleCosts {
  std::vector<double> forward;          // per stage (= rank); > 0
  std::vector<double> backward_input;   // per stage; > 0
  std::vector<double> backward_weight;  // per stage; > 0
  std::vector<double> transfer;         // per boundary s → s+1 (pp_size − 1 entries), both directions; >= 0
};

struct ListSchedulePolicy {
  // Per rank, >= 1, in micro-batch stashes: a micro-batch between its F and its I counts 1, between its I and
  // its W counts weight_stash_fraction (I frees what only the input gradient needed).
  std::vector<int> memory_limit;
  double weight_stash_fraction = 1.0;  // in (0, 1]
  std::vector<int> forward_ahead;  // per rank, >= 1
  double weight_fill = 1.0;        // >= 0
  bool forward_fits_only = false;
  // Keep W for the tail: a W runs only when the memory limit blocks the next F or no F is left (then at any
  // wait), never just to fill a gap while forwards remain. Trades memory for a shorter tail.
  bool defer_weights = false;
  // Swap steps 1 and 2: a ready F (within the limits) goes before a ready I, as in 1F1B's and ZB-H1's steady
  // state, where feeding the next stage first keeps it busy.
  bool prefer_forward = false;
};

// Per-rank action lists (F, I, W only) for pp_size ranks and num_microbatches micro-batches.
std::vector<std::vector<Action>> list_schedule(int pp_size, int num_microbatches, const ListScheduleCosts& costs,
                                               const ListSchedulePolicy& policy);

}  // namespace cleave::pipeline::detail
