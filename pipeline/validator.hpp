// Schedule validator (docs/architecture.md): a schedule runs, completely and without deadlock, or it is rejected with
// a one-line reason and the step × rank grid with the offending action(s) marked >>like this<<.
//
// Checks, in order (the first failure is reported):
//   1. shape and placement: sizes, every action's stage and micro-batch in range, stage placed on the rank
//      that lists it;
//   2. no action appears twice; at most one OPTIMIZER_STEP per rank;
//   3. every (stage, micro-batch) has exactly one F and either one B or one I and one W;
//   4. on one rank, an action comes after what it needs from the same rank (F before I/B, I before W, and
//      across stages held by the same rank, e.g. ZB-V's turn);
//   5. lowered schedules only: every cross-rank dependency has its RECV on the consumer before the
//      consumer and its SEND on the producer after the producer; no SEND/RECV for a boundary inside one
//      rank; one REDUCE_GRAD per stage after the stage's last W/B; one OPTIMIZER_STEP last on every rank;
//   6. lowered schedules only: for every (sender, receiver) pair, the sender posts its messages to the
//      receiver in the order the receiver posts their receives (p2p_posting.hpp: NCCL pairs by posting
//      order, not by tag);
//   7. the dry run (dependencies.hpp: blocking, batched communication) finishes: no deadlock.
#pragma once

#include <string>
#include <vector>

#include "pipeline/dependencies.hpp"
#include "pipeline/schedule_chart.hpp"
#include "pipeline/schedule.hpp"

namespace cleave::pipeline {

struct ValidationResult {
  bool ok = true;
  std::string reason;           // one line; empty when ok
  std::vector<GridMark> marks;  // the offending actions
  std::string grid;             // step × rank grid with the marks; empty when ok
  DryRun run;                   // the dry run (steps of every action; valid when ok)

  // "schedule 'NAME' is invalid: REASON\n" followed by the grid.
  std::string message(const std::string& schedule_name) const;
};

ValidationResult validate_schedule(const Schedule& schedule);

// Throws Error(validate_schedule(schedule).message(...)) when the schedule is invalid.
void check_schedule(const Schedule& schedule);

}  // namespace cleave::pipeline
