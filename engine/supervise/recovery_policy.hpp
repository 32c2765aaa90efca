// The decisions `cleave run` makes after a failure, as pure functions of numbers and text (no processes, no
// files), so each rule is unit-tested on its own (tests/unit/supervise/recovery_policy_test.cpp):
//   - which rank failed and why, from the job's output (classify_failure);
//   - which slots are left: the slot list minus the failed ranks' slots and the slots a health check refused
//     (remaining_slots; rank r of an attempt runs on slot r of that attempt's list: mpirun's by-slot mapping);
//   - whether to restart at all: a failure no restart cures (restart_can_cure: the trainer's exit codes of
//     engine/core/exit_code.hpp for bad input and an unusable checkpoint, never its log text), --min-ranks and the --max-restarts budget (decide_restart);
//   - the layout with --keep-layout: tp x cp x pp and ep kept, dp shrunk to what the slots, the global batch and
//     ep allow
//     (keep_layout); the planner's choice is engine/supervise/supervisor.cpp's, through the planner;
//   - the smallest world a memory cap can hold, for the refusal's message (smallest_world);
//   - the checkpoint interval a target of lost work asks for (checkpoint_interval_for).
// Invariant: the global batch never changes (a new layout changes dp, the micro-batch and so the accumulation
// steps only), so the data order and the loss curve continue as if nothing had happened.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/planner/plan_search.hpp"

namespace cleave::supervise {

// One place a rank can run: a host and the slot's number on it.
struct Slot {
  std::string host = "localhost";
  int index = 0;
  bool operator==(const Slot&) const = default;
};

// `n` slots on this machine.
std::vector<Slot> local_slots(int n);
// The slots of a SLURM allocation on this machine, from SLURM_NTASKS's text: a positive integer, digits only.
// Anything else (empty, "abc", "4x", "-2", "0", past INT_MAX) throws InputError (exit 64) naming the variable, its
// value and the fix.
std::vector<Slot> slurm_slots(std::string_view ntasks);
// An Open MPI hostfile: "host [slots=N]" per line, '#' comments, blank lines; a host without slots= has one.
// Throws Error naming `path` and the line for anything else.
std::vector<Slot> parse_hostfile(std::string_view text, std::string_view path);
// The hostfile of `slots` ("host slots=K" per host, in order of first appearance).
std::string hostfile_text(const std::vector<Slot>& slots);

// What the job's output says about its failure.
enum class FailureKind {
  kKilled,   // a rank died on a signal (the launcher names it): its slot is dropped
  kHung,     // the watchdog found a rank not answering: its slot is dropped
  kError,    // a rank reported an error itself (an exception): the slots stay (a software fault, not a node)
  kUnknown,  // the job ended non-zero and no line names a rank: the slots stay
  kNoIntactCheckpoint,  // the job exited ExitCode::kNoIntactCheckpoint: every checkpoint is damaged; no restart
  kCheckpointMismatch,  // the job exited ExitCode::kCheckpointMismatch: the run does not fit its checkpoint (a
                        // config change --resume refuses, another model, ...); no restart
  kBadInput,  // the job exited ExitCode::kBadInput: its command line or config is wrong (an unknown option or config
              // key, a typo in --allow-config-change, a bad value), found before any work; no restart
};
struct Failure {
  FailureKind kind = FailureKind::kUnknown;
  std::vector<int> ranks;  // world ranks of the attempt (empty for kUnknown)
  std::string why;         // one line, quoted into the report
};
// Reads the launcher's and the ranks' lines (Open MPI's "process rank R with PID ... exited on signal S",
// the watchdog's "not answering within Xs: rank R[, rank Q]", srun's "task R: Killed", "[rank R/N] error: ...").
// A hang outranks the signal that ended it (the watchdog's abort kills the hung rank too), a death outranks an
// error (a peer's error follows the death).
// Exit codes ExitCode::kNoIntactCheckpoint, kCheckpointMismatch and kBadInput (engine/core/exit_code.hpp) are
// kNoIntactCheckpoint, kCheckpointMismatch and kBadInput whatever the lines say; `why` is then the rank's whole error
// line (it lists every checkpoint and what is wrong with it; every key refused, with both values and the fix; the
// unknown key and the nearest known one).
Failure classify_failure(std::string_view output, int exit_code);
std::string_view failure_kind_name(FailureKind kind);

// Whether restarting can cure a failure of `kind`: not kNoIntactCheckpoint, kCheckpointMismatch nor kBadInput (every
// attempt would fail the same way at its load or its reading of the command line, so the supervisor stops at once
// instead of spending --max-restarts).
bool restart_can_cure(FailureKind kind);

// The exit code of `cleave run` when it gives up at once on a failure of `kind`: the trainer's own code for a kind
// that has one (kBadInput 64, kNoIntactCheckpoint 66, kCheckpointMismatch 78: engine/core/exit_code.hpp), passed
// on so a script over `cleave run` reads the cause as it would from `cleave train`; otherwise 1.
int give_up_exit_status(FailureKind kind);

// `slots` minus those of `failure` (kKilled, kHung) and those with healthy[i] false (healthy may be empty = all).
std::vector<Slot> remaining_slots(const std::vector<Slot>& slots, const Failure& failure,
                                  const std::vector<bool>& healthy);

// --min-ranks and --max-restarts. `restarts_done`: restarts already made before this failure.
struct RestartDecision {
  bool restart = false;
  std::string reason;  // why not (empty when restarting)
};
RestartDecision decide_restart(int restarts_done, int max_restarts, int ranks_left, int min_ranks);

// --keep-layout: `old`'s tp, cp, pp, ep, schedule, virtual stages, ZeRO stage and recomputation on at most `world`
// ranks; dp is the largest d <= world / (tp cp pp) such that ep divides d cp (ep is taken from the dp × cp ranks)
// and the global batch splits into d replicas of whole micro-batches: the old micro-batch when it divides
// global / d, else the largest divisor of global / d below it. ZeRO > 0 at d cp = 1 (nothing to shard over)
// becomes 0. nullopt when no d fits (the error is the caller's: it names the smallest world).
std::optional<planner::PlanChoice> keep_layout(const planner::PlanChoice& old, int world);

// The smallest world in [from, to] for which `fits` is true (nullopt: none). Pure given `fits`.
std::optional<int> smallest_world(int from, int to, const std::function<bool(int)>& fits);

// --max-lost-seconds: save every floor(max_lost_s / step_s) steps (at least 1); step_s > 0.
std::int64_t checkpoint_interval_for(double max_lost_s, double step_s);

}  // namespace cleave::supervise
