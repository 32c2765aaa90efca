// ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", handcrafted schedule 1): 1F1B with the
// backward split into I (input gradient, on the critical path) and W (weight gradient, deferrable).
//
// Ordering rule on rank r (= stage r), micro-batches in increasing order for each of F, I and W:
//   1. warm-up: min(p − 1 − r, m) forwards;
//   2. up to r pairs (F, I) — rank r defers its first r weight passes;
//   3. (F, I, W) while forwards remain;
//   4. (I, W) while input gradients remain;
//   5. the r deferred W.
// The deferred W fill the drain bubble: each rank finishes with as many W as it has ranks above it + 1,
// so the I chain up the pipeline runs without waiting.
// Warm-up: min(p − 1 − r, m) forwards, as 1F1B.
// Memory bound: min(p, m) live stashes on every rank (a stash lives until its W): rank 0 as 1F1B, later
// ranks hold more than in 1F1B because their W are deferred.
// Bubble with F = I = W (= 1 unit) and m ≥ p: every rank idles exactly p − 1 units, one third of 1F1B's
// 3(p − 1); bubble_fraction = (p − 1) / (3m + p − 1). For m < p each rank idles 2p − 1 − m.
#include <algorithm>

#include "partition/stage_partitioner.hpp"
#include "pipeline/schedules/schedules.hpp"

namespace cleave::pipeline {

Schedule zb_h1_schedule(int pp_size, int num_microbatches) {
  detail::check_generator_args("zb_h1", pp_size, num_microbatches);
  const int m = num_microbatches;
  Schedule schedule =
      make_empty_schedule("zb_h1", pp_size, m, 1, partition::place_stages(pp_size, 1, partition::StagePlacement::kLooped));
  for (int r = 0; r < pp_size; ++r) {
    auto& actions = schedule.ranks[r];
    int f = 0, i = 0, w = 0;
    auto forward = [&] { actions.push_back({ActionKind::kForward, r, f++}); };
    auto input = [&] { actions.push_back({ActionKind::kBackwardInput, r, i++}); };
    auto weight = [&] { actions.push_back({ActionKind::kBackwardWeight, r, w++}); };
    for (int k = 0; k < std::min(pp_size - 1 - r, m); ++k) forward();
    for (int k = 0; k < r && f < m; ++k) {
      forward();
      input();
    }
    while (f < m) {
      forward();
      input();
      weight();
    }
    while (i < m) {
      input();
      weight();
    }
    while (w < m) weight();
  }
  return schedule;
}

}  // namespace cleave::pipeline
