// 1F1B, a.k.a. PipeDream-flush (Narayanan et al. 2021): the memory-bounded form of GPipe.
//
// Ordering rule: rank r (= stage r) runs w_r forwards, then alternates F(w_r + i), B(i) while forwards
// remain, then the remaining backwards; micro-batches in increasing order.
// Warm-up: w_r = min(p − 1 − r, m) forwards before the first (F, B) pair.
// Memory bound: min(p − r, m) live stashes on rank r (rank 0: min(p, m) ≤ p).
// Bubble with uniform costs: (p − 1) / (m + p − 1), the same as GPipe; only the memory differs.
#include <algorithm>

#include "partition/stage_partitioner.hpp"
#include "pipeline/schedules/schedules.hpp"

namespace cleave::pipeline {

Schedule one_f_one_b_schedule(int pp_size, int num_microbatches) {
  detail::check_generator_args("1f1b", pp_size, num_microbatches);
  const int m = num_microbatches;
  Schedule schedule = make_empty_schedule("1f1b", pp_size, m, 1,
                                          partition::place_stages(pp_size, 1, partition::StagePlacement::kLooped));
  for (int r = 0; r < pp_size; ++r) {
    auto& actions = schedule.ranks[r];
    const int warmup = std::min(pp_size - 1 - r, m);
    for (int j = 0; j < warmup; ++j) actions.push_back({ActionKind::kForward, r, j});
    for (int i = 0; i < m - warmup; ++i) {
      actions.push_back({ActionKind::kForward, r, warmup + i});
      actions.push_back({ActionKind::kBackward, r, i});
    }
    for (int j = m - warmup; j < m; ++j) actions.push_back({ActionKind::kBackward, r, j});
  }
  return schedule;
}

}  // namespace cleave::pipeline
