// Schedule simulator: predicts the timeline of one training step from per-action costs (docs/architecture.md).
//
// Model. The schedule is lowered first if it is not (lowering.hpp) and validated. Each rank runs its list
// in order; an action starts when the rank is free and its inputs are there:
//   F / I / W / B     duration from the stage's cost (B = I + W); a cross-rank input is there when the
//                     matching SEND's data arrives: send time + p2p_latency + bytes / p2p_bandwidth
//                     + the sending stage's send wait (StageCost::forward_send_wait / backward_send_wait)
//   SEND_*            asynchronous: takes no rank time, leaves when reached (right after its producer)
//   RECV_*            posted ahead: takes no rank time; its timeline entry spans [posted, data arrival]
//   blocking_p2p      (SimulationCosts) a run whose p2p blocks, as Megatron-LM's of 2021 did
//                     (p2p_communication.py: batch_isend_irecv, wait on every request, torch.cuda.synchronize),
//                     placed where its schedules.py places it: the compute keeps its order and before each
//                     compute one batch posts the sends the rank's earlier compute left and the receives this
//                     compute needs (with blocking_fb_pairs, the interleaved schedule's steady state: an F and
//                     the backward right after it run back to back, one batch before the pair); a batch holds
//                     the rank until all its transfers are done; a transfer starts when both its SEND's and its
//                     RECV's batches are posted (rendezvous) and takes p2p_latency + bytes / p2p_bandwidth
//   REDUCE_GRAD       the stage's reduce_grad cost;  OPTIMIZER_STEP  the optimizer_step cost
//   F&B pair          a schedule with overlapped pairs (Schedule::overlap_fb_pairs, overlap_schedule.hpp): an F
//                     and the I or B after it start together, once both inputs are there; each side's all-to-all
//                     (forward_all_to_all, backward_all_to_all) runs while the other side computes, timed by
//                     time_overlapped_pair (overlap_pair_timing.hpp): with the waits counted
//                     (forward_all_to_all_waits, backward_all_to_all_waits) the executor's baton over equal
//                     segments, each wait hidden only by the other side's one segment that runs during it, the
//                     exchange's own time (forward_all_to_all_own, backward_all_to_all_own) never;
//                     uncounted (0), max(0, a2a − the other's whole compute). F is booked cF + its exposed part,
//                     the backward after it cB + its (cB = I, or I + W for B); under PairCores::kShared (more
//                     ranks than cores) each side also keeps its hidden part: the hand-over takes a co-runner's
//                     core time, so the step gains nothing (SimulationResult::shared_core_all_to_all). DeepSeek's
//                     DualPipe hides its MoE all-to-alls this way. Alone, an action exposes all of its a2a.
// Event-driven: ranks are advanced in order of the time they become free; a rank whose next compute
// waits for a SEND not yet simulated is parked until that SEND is. Start times are max(rank free, inputs
// ready), so the result does not depend on processing order. With zero latency the timing is exactly
// the compute schedule's dependency graph, which is what the published bubble formulas assume.
//
// Costs are a plain per-stage table in any time unit (the CLI uses milliseconds); fill it from
// partition/cost_model.hpp, from measurements, or uniformly.
#pragma once

#include <vector>

#include "pipeline/dependencies.hpp"
#include "pipeline/overlap_pair_timing.hpp"
#include "pipeline/schedule.hpp"
#include "pipeline/timeline.hpp"

namespace cleave::pipeline {

struct StageCost {
  double forward = 1.0;          // F
  double backward_input = 1.0;   // I
  double backward_weight = 1.0;  // W   (B costs backward_input + backward_weight)
  double reduce_grad = 0.0;      // REDUCE_GRAD
  double output_bytes = 0.0;     // activation sent to stage + 1 per micro-batch (= gradient sent back)
  // The MoE all-to-alls (expert parallelism) of one micro-batch's F and of its I (or B), on top of the costs
  // above: an action alone waits for them (its duration is cost + all-to-all); in an overlapped F&B pair they
  // hide behind the other side's compute (see the model above).
  double forward_all_to_all = 0.0;
  double backward_all_to_all = 0.0;
  // How many waits each splits into (the MoE block's count exchange, dispatch, combine: 3 per block in F; the
  // dispatch's and combine's gradients: 2 in I); 0 = not counted (the pair hides it behind the other side's whole
  // compute, an upper bound on what the executor's baton hides).
  int forward_all_to_all_waits = 0;
  int backward_all_to_all_waits = 0;
  // Of each all-to-all, the exchange's own time (the rank's work inside the calls: posting, shared-memory copies),
  // which a pair never hides (overlap_pair_timing.hpp); at most the all-to-all. 0 = all of it is waiting.
  double forward_all_to_all_own = 0.0;
  double backward_all_to_all_own = 0.0;
  // Added to the transfer time of what this stage's F sends on (its activation) and of what its I or B sends
  // back (its input gradient), on top of p2p_latency + bytes / p2p_bandwidth: the time the receiver waits at that
  // transfer for what the sender lost (the planner's point_to_point_wait). 0 = none.
  double forward_send_wait = 0.0;
  double backward_send_wait = 0.0;
};

struct SimulationCosts {
  std::vector<StageCost> stages;  // one per stage
  double optimizer_step = 0.0;
  double p2p_latency = 0.0;       // per message, in the time unit
  double p2p_bandwidth = 0.0;     // bytes per time unit; 0 = infinite
  // The rank waits for its own transfers (the model above): a published run's p2p on the critical path.
  bool blocking_p2p = false;
  bool blocking_fb_pairs = false;  // with blocking_p2p: Megatron-LM's interleaved steady state (above)
  // Who pays for an overlapped pair's hidden all-to-all (overlap_pair_timing.hpp): kSpare, the step gains it;
  // kShared (the plan's ranks outnumber the node's cores), the step keeps it.
  PairCores pair_cores = PairCores::kSpare;
  // Optional replay of a measured step: per rank, per action of the LOWERED schedule, the duration of that
  // work action (F / I / W / B / REDUCE_GRAD / OPTIMIZER_STEP), used instead of its cost above; a negative
  // entry (and every SEND / RECV entry) keeps the cost above. Empty = the costs above everywhere.
  std::vector<std::vector<double>> action_durations;

  // Every stage costs F, I, W; no communication or reduction cost.
  static SimulationCosts uniform(int num_stages, double forward = 1.0, double backward_input = 1.0,
                                 double backward_weight = 1.0);
};

struct SimulationResult {
  Schedule lowered;    // the schedule that was timed (blocking_p2p: with its transfers where that run posts them)
  Timeline timeline;   // every action of `lowered`, per rank in list order
  TimelineStats stats;
  // Per rank: the all-to-all time its actions waited for (not hidden behind a paired action's compute).
  std::vector<double> exposed_all_to_all;
  // Per rank: of the all-to-all its pairs hid, what still took step time (PairCores::kShared; 0 under kSpare).
  std::vector<double> shared_core_all_to_all;
};

// Throws Error for an invalid schedule (the validator's message) or a cost table of the wrong size or
// with negative / non-finite entries.
SimulationResult simulate(const Schedule& schedule, const SimulationCosts& costs);

// A schedule made ready to be timed under many cost tables (the planner prices each schedule for every ZeRO,
// recomputation, tp, cp and ep choice of a layout; lowering, validating and indexing it were most of a
// simulation's time): lowered if it is not, validated, and its actions indexed, once. Throws Error for an invalid
// schedule, as simulate does. Invariant: simulate(prepared, costs) == simulate(schedule, costs) for the schedule
// it was made from and every cost table (the same timing code on the same lowered list and index; the cost table
// is still checked on every call).
class PreparedSchedule {
 public:
  explicit PreparedSchedule(const Schedule& schedule);
  const Schedule& lowered() const { return lowered_; }
  const ActionIndex& index() const { return index_; }

 private:
  Schedule lowered_;
  ActionIndex index_;
};
SimulationResult simulate(const PreparedSchedule& prepared, const SimulationCosts& costs);

}  // namespace cleave::pipeline
