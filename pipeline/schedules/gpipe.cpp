// GPipe (Huang et al. 2019).
//
// Ordering rule: rank r (= stage r) runs F0 … F(m−1), then B0 … B(m−1).
// Warm-up: all m forwards before the first backward.
// Memory bound: m live stashes on every rank (the whole batch's activations).
// Bubble with uniform costs: (p − 1) / (m + p − 1) of ranks × makespan; makespan (m + p − 1)(F + B).
#include "partition/stage_partitioner.hpp"
#include "pipeline/schedules/schedules.hpp"

namespace cleave::pipeline {

Schedule gpipe_schedule(int pp_size, int num_microbatches) {
  detail::check_generator_args("gpipe", pp_size, num_microbatches);
  Schedule schedule = make_empty_schedule("gpipe", pp_size, num_microbatches, 1, partition::place_stages(pp_size, 1, partition::StagePlacement::kLooped));
  for (int r = 0; r < pp_size; ++r) {
    auto& actions = schedule.ranks[r];
    for (int j = 0; j < num_microbatches; ++j) actions.push_back({ActionKind::kForward, r, j});
    for (int j = 0; j < num_microbatches; ++j) actions.push_back({ActionKind::kBackward, r, j});
  }
  return schedule;
}

}  // namespace cleave::pipeline
