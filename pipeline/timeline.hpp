// Timeline: when each action of each pp rank ran, predicted (simulator.hpp) or measured (the executor),
// and the statistics both are judged by, so predicted and measured numbers use one set of definitions.
//
// Definitions (docs/architecture.md; every reported number says which one it is):
//   busy(r)         Σ (end − start) of rank r's F, I, W, B, REDUCE_GRAD and OPTIMIZER_STEP actions
//                   (SEND/RECV are not work: sends are asynchronous, a RECV only marks when data arrived)
//   makespan        latest end − earliest start over all actions of all ranks
//   bubble_fraction                 Σ_r (makespan − busy(r)) / (ranks × makespan): what a synchronised
//                                   optimizer step pays; per rank: (makespan − busy(r)) / makespan
//   stage_bubble_fraction(r)        idle time between rank r's own first and last work action over that
//                                   span: (span(r) − busy(r)) / span(r); whole pipeline:
//                                   Σ_r (span(r) − busy(r)) / Σ_r span(r). It ignores the start offset of
//                                   later ranks, which the zero-bubble papers hide by overlapping steps.
//   longest_span    max_r span(r), span(r) = last end − first start of rank r's work actions: the step when
//                   consecutive steps overlap because no synchronisation holds every rank before the optimizer
//                   step (the zero-bubble paper's post-validation; its "cost", the largest execution time of all
//                   stages). Never above the makespan.
//   peak_activations(r)  max over rank r's action order of live stashes: +1 at each F, −1 at each W or B
//                   (an I keeps the stash for its W). With virtual stages a stash is one chunk's.
#pragma once

#include <array>
#include <cstddef>
#include <vector>

#include "pipeline/action.hpp"

namespace cleave::pipeline {

// The kinds of collective whose waits a measured compute span carries, in layers::CommKind's order (tp, cp,
// zero_gather, expert_all_to_all; layers/comm_wait.hpp).
inline constexpr std::size_t kNumCommWaitKinds = 4;

struct TimedAction {
  Action action;
  double start = 0.0;
  double end = 0.0;
  // Measured timelines only: the time inside [start, end] the rank was blocked on each kind of collective (same
  // unit as start and end); zero in simulated ones.
  std::array<double, kNumCommWaitKinds> comm_wait{};
};

// Per pp rank, its actions in execution order. Times are in any one unit (the simulator's cost unit;
// the executor's seconds).
struct Timeline {
  std::vector<std::vector<TimedAction>> ranks;
};

struct RankStats {
  int rank = 0;
  double busy = 0.0;
  double first_start = 0.0;  // first work action (F/I/W/B/REDUCE_GRAD/OPTIMIZER_STEP)
  double last_end = 0.0;     // last work action
  double bubble_fraction = 0.0;
  double stage_bubble_fraction = 0.0;
  int peak_activations = 0;
};

struct TimelineStats {
  double start = 0.0;  // earliest start
  double makespan = 0.0;
  double longest_span = 0.0;
  double bubble_fraction = 0.0;
  double stage_bubble_fraction = 0.0;
  std::vector<RankStats> ranks;
};

// True for the actions that count as busy time.
bool is_work(ActionKind kind);

TimelineStats timeline_stats(const Timeline& timeline);

// Peak live stashes of one rank's action order (definition above).
int peak_activations(const std::vector<Action>& actions);

}  // namespace cleave::pipeline
