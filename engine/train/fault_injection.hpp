// Fault injection for the failure drills (tests/e2e/failure_drill.sh). A TEST HOOK, not a config key: it is
// read from the environment variable CLEAVE_FAULT_INJECT, never from a config file, and a run without it is
// untouched.
//
//   CLEAVE_FAULT_INJECT=RANK:STEP:WHERE[:ACTION]
//     RANK    world rank that fails
//     STEP    1-based training step in which it fails
//     WHERE   forward    before the rank's forward of micro-batch 1 of that step (micro-batch 0 when the step
//                        has one): mid pipeline step, with the sends of micro-batch 0 already posted
//             dp_reduce  right after the rank posts its first data-parallel gradient bucket (needs dp > 1):
//                        the peers are inside the bucket reduction
//             save       in the rank's checkpoint writer of the checkpoint taken after step STEP, once its file
//                        is written and before the commit (checkpoint.background: the step loop runs on)
//     ACTION  throw (default: a cleave::Error thrown where a failing layer would throw), kill (SIGKILL
//             itself), stop (SIGSTOP itself)
//
// Invariant: the plan fires at most once per process, and only at the named rank, step and point.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cleave::train {

enum class FaultPoint { kForward, kDpReduce, kSave };
enum class FaultAction { kThrow, kKill, kStop };

struct FaultPlan {
  int rank = 0;
  std::int64_t step = 1;
  FaultPoint point = FaultPoint::kForward;
  FaultAction action = FaultAction::kThrow;
  bool fired = false;

  // True when this plan fails `rank` at `step` (1-based) at `point` and has not fired yet.
  bool due(int world_rank, std::int64_t step_1based, FaultPoint at) const {
    return !fired && world_rank == rank && step_1based == step && at == point;
  }
  // Performs the action (marks the plan fired first). `what` describes the place for the thrown message,
  // e.g. "stage 1 forward of micro-batch 1".
  void fire(std::string_view what);
};

// Parses the variable's value; throws cleave::Error naming CLEAVE_FAULT_INJECT and the expected form.
FaultPlan parse_fault_plan(std::string_view text);
// The plan in the environment (nullopt when CLEAVE_FAULT_INJECT is unset or empty).
std::optional<FaultPlan> fault_plan_from_env();

}  // namespace cleave::train
