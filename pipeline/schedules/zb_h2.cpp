// ZB-H2 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", handcrafted schedule 2): zero bubble for about
// twice 1F1B's activation memory. Extra forwards in the warm-up fill the bubble before the first I; weight
// passes are deferred into the tail, which turns 1F1B's trapezoid into a parallelogram.
//
// Ordering rule (one stage per rank, F = I = W = 1 unit, no transfer time): the order in which a unit-time
// event-driven run executes when every rank, whenever free, runs
//   the oldest I whose gradient is there; else the next F if its input is there and the rank holds fewer
//   than 2p − 1 live stashes (+1 at F, −1 at W); else its oldest pending W; else it waits
// (detail::list_schedule with unit costs, memory limit 2p − 1, weight_fill 1). Micro-batches in increasing
// order for each of F, I and W. For m ≥ 2p − 1 that is, on rank r: 2(p − r) − 1 warm-up forwards, then I and
// F alternating while W are deferred (the later ranks defer most, as in the paper's (2p − 2r − 1)·M_B +
// 2r·M_W), then one F, I and W per micro-batch in the steady state, then the deferred W.
// Warm-up: min(2(p − r) − 1, m) forwards before the first I.
// Memory bound: min(2p − 1, m) live stashes on every rank (a stash lives until its W); rank 0 reaches 2p − 1.
// Bubble with F = I = W: for m ≥ 2p − 1 every rank is busy without a gap from its first action (at r) to its
// last, so stage_bubble_fraction = 0, makespan = 3m + p − 1 and bubble_fraction = (p − 1) / (3m + p − 1)
// (the start offsets only). For m < 2p − 1 there is too little work to fill the warm-up and a bubble remains.
// With real costs, the paper's Table 5 bubble rates for ZB-H2 are reproduced from its profiled T_F, T_B, T_W,
// T_comm (tests/unit/pipeline/paper_bubble_test.cpp).
#include "partition/stage_partitioner.hpp"
#include "pipeline/schedules/list_scheduler.hpp"
#include "pipeline/schedules/schedules.hpp"

namespace cleave::pipeline {

Schedule zb_h2_schedule(int pp_size, int num_microbatches) {
  detail::check_generator_args("zb_h2", pp_size, num_microbatches);
  const int p = pp_size, m = num_microbatches;
  const auto np = static_cast<std::size_t>(p);
  detail::ListScheduleCosts unit{std::vector<double>(np, 1.0), std::vector<double>(np, 1.0),
                                 std::vector<double>(np, 1.0), std::vector<double>(np - 1, 0.0)};
  detail::ListSchedulePolicy policy;
  policy.memory_limit.assign(np, 2 * p - 1);
  policy.forward_ahead.assign(np, 2 * p - 1);
  policy.weight_fill = 1.0;
  Schedule schedule =
      make_empty_schedule("zb_h2", p, m, 1, partition::place_stages(p, 1, partition::StagePlacement::kLooped));
  schedule.ranks = detail::list_schedule(p, m, unit, policy);
  return schedule;
}

}  // namespace cleave::pipeline
