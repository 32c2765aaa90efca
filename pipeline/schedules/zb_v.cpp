// ZB-V (Qi et al. 2023, §6): two chunks per rank in V-shaped placement — rank r holds stage r (chunk 0,
// going down the ranks) and stage 2p − 1 − r (chunk 1, coming back up) — with the backward split into I
// and W. The turn from stage p − 1 to stage p stays on rank p − 1 (no transfer), and with F = I = W every
// rank runs without a gap from its first to its last action once m ≥ 2p − 1.
//
// Ordering rule on rank r (n = max(m, 2p − 1); f0, f1 count chunk-0 / chunk-1 forwards issued, i0, i1
// input gradients; micro-batches in increasing order per chunk and kind):
//   1. 2(p − r) − 1 chunk-0 forwards;
//   2. r pairs (chunk-1 F, chunk-0 F);
//   3. p − r triples (chunk-1 F, chunk-1 I, chunk-1 W);
//   4. steady, while f1 < f0 or f0 < n: [chunk-0 F if f0 < n], chunk-0 I, chunk-0 W, chunk-1 F,
//      chunk-1 I, chunk-1 W;
//   5. r pairs (chunk-0 I, chunk-1 I), whose W are deferred;
//   6. p − r pairs (chunk-0 I, chunk-0 W);
//   7. the deferred W: chunk 1's, then chunk 0's.
// The rule is written for n ≥ 2p − 1 micro-batches; for m < 2p − 1 the schedule for n is generated and
// the actions of micro-batches ≥ m are dropped (removing actions from a deadlock-free schedule keeps it
// deadlock-free). This is the construction of PyTorch's ScheduleZBVZeroBubble.
// Warm-up: 2(p − r) − 1 + r chunk-0 forwards and r chunk-1 forwards before the first backward.
// Memory bound: min(2p, 2m) live chunk stashes per rank (each half a rank's layers, so ≈ p full-rank
// stashes, the same as 1F1B's rank 0); exactly 2p on every rank when m ≥ 2p − 1.
// Bubble with F = I = W = 1 unit: for m ≥ 2p − 1 rank r is busy without a gap from r to 6m + r, so
// stage_bubble_fraction is exactly 0 on every rank, makespan = 6m + p − 1 and
// bubble_fraction = (p − 1) / (6m + p − 1) (the start offsets only).
#include <algorithm>

#include "engine/core/error.hpp"
#include "partition/stage_partitioner.hpp"
#include "pipeline/schedules/schedules.hpp"

namespace cleave::pipeline {

Schedule zb_v_schedule(int pp_size, int num_microbatches) {
  detail::check_generator_args("zb_v", pp_size, num_microbatches);
  const int p = pp_size, m = num_microbatches;
  const int n = std::max(m, 2 * p - 1);
  Schedule schedule =
      make_empty_schedule("zb_v", p, m, 2, partition::place_stages(p, 2, partition::StagePlacement::kVShape));
  for (int r = 0; r < p; ++r) {
    const int s0 = r, s1 = 2 * p - 1 - r;
    std::vector<Action> actions;
    int f0 = 0, f1 = 0, i0 = 0, i1 = 0, w0 = 0, w1 = 0;
    auto push = [&](ActionKind kind, int stage, int& counter) { actions.push_back({kind, stage, counter++}); };
    for (int k = 0; k < 2 * (p - r) - 1; ++k) push(ActionKind::kForward, s0, f0);
    for (int k = 0; k < r; ++k) {
      push(ActionKind::kForward, s1, f1);
      push(ActionKind::kForward, s0, f0);
    }
    for (int k = 0; k < p - r; ++k) {
      push(ActionKind::kForward, s1, f1);
      push(ActionKind::kBackwardInput, s1, i1);
      push(ActionKind::kBackwardWeight, s1, w1);
    }
    while (f1 < f0 || f0 < n) {
      if (f0 < n) push(ActionKind::kForward, s0, f0);
      push(ActionKind::kBackwardInput, s0, i0);
      push(ActionKind::kBackwardWeight, s0, w0);
      push(ActionKind::kForward, s1, f1);
      push(ActionKind::kBackwardInput, s1, i1);
      push(ActionKind::kBackwardWeight, s1, w1);
    }
    for (int k = 0; k < r; ++k) {
      push(ActionKind::kBackwardInput, s0, i0);
      push(ActionKind::kBackwardInput, s1, i1);
    }
    for (int k = 0; k < p - r; ++k) {
      push(ActionKind::kBackwardInput, s0, i0);
      push(ActionKind::kBackwardWeight, s0, w0);
    }
    while (w1 < i1) push(ActionKind::kBackwardWeight, s1, w1);
    while (w0 < i0) push(ActionKind::kBackwardWeight, s0, w0);
    CLEAVE_ASSERT(f0 == n && f1 == n && i0 == n && i1 == n && w0 == n && w1 == n,
                  "zb_v rank {} issued F {}/{} I {}/{} W {}/{} of {}", r, f0, f1, i0, i1, w0, w1, n);
    std::erase_if(actions, [m](const Action& a) { return a.microbatch >= m; });
    schedule.ranks[r] = std::move(actions);
  }
  return schedule;
}

}  // namespace cleave::pipeline
