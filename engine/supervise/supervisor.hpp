// `cleave run`'s loop: start the job (mpirun, or srun inside a SLURM allocation), watch it, and on a failure end it,
// decide the ranks left (the slots minus the failed rank's, minus those a health check refuses; --min-ranks), the
// layout for them (--keep-layout: tp x cp x pp and ep kept, dp shrunk; default: the planner's best plan under the
// memory cap),
// and start it again from the newest complete checkpoint with the same global batch, at most --max-restarts times.
// The decisions are recovery_policy.hpp's pure functions; the records restart_record.hpp's; the processes
// job_process.hpp's. docs/multi-rank.md, "Recovery", is the user's description.
//
// Invariants: nothing of the run is deleted or overwritten by the supervisor (checkpoints and metrics are the
// trainer's; a failed attempt's metrics.jsonl is copied to supervisor/attempt_N.metrics.jsonl before the restart
// trims it); a refusal (too few ranks, no layout fits, the budget spent) ends the job with the newest complete
// checkpoint untouched and says how to continue; a failure no restart cures (every checkpoint damaged: the trainer's
// exit code 66) ends it at once, the budget unspent; no rank outlives the supervisor.
#pragma once

#include <string>
#include <vector>

#include "engine/supervise/recovery_policy.hpp"

namespace cleave::supervise {

struct SuperviseOptions {
  std::vector<Slot> slots;
  bool use_hostfile = false;        // pass the slots left as a generated --hostfile (mpirun)
  bool slurm = false;               // srun inside an allocation instead of mpirun
  int min_ranks = 1;
  int max_restarts = 3;
  bool keep_layout = false;
  std::string health_check;         // shell command per slot (CLEAVE_SLOT_HOST, CLEAVE_SLOT_INDEX); non-zero = bad
  double max_lost_seconds = 0;      // > 0: checkpoint.interval of a restart from the measured step time
  double teardown_grace_s = 20;     // after a failure line, how long the launcher may take to end the job itself
  std::vector<std::string> launcher;  // words before "-n N"; empty = mpiexec (srun --mpi=pmix --kill-on-bad-exit=1 under SLURM)
  std::string profile;              // hardware profile for the planner ("" = measure this machine once)
  std::string memory_limit;         // the planner's cap ("" = device.memory_limit, else the profile's memory)
  std::string cleave;               // this executable
  std::string config_path;          // after "--"
  std::vector<std::string> overrides;   // --set values after "--"
  std::vector<std::string> train_args;  // other train options after "--" (not --resume / --restart-record)
  std::string resume;                   // --resume given after "--" (the first attempt only)
};

// Runs the job to its end; returns the exit code of `cleave run` (0 completed, 75 stopped on SIGTERM after a save,
// 1 failed for good). Throws Error for bad input found before anything starts.
int supervise(const SuperviseOptions& options);

}  // namespace cleave::supervise
