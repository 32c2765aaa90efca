// One attempt of `cleave run` (supervisor.hpp): the command line that starts the job, and the watch over the job
// until no process of it is left.
//
// Invariants: the watch returns only once the launcher has exited and no process of its group is alive (a group
// that outlives the launcher past teardown_grace_s is ended); a failure line or a preemption notice is noted at the
// moment it streams in (the detection time of the restart record), never guessed afterwards.
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "engine/supervise/job_process.hpp"
#include "engine/supervise/recovery_policy.hpp"
#include "engine/supervise/supervisor.hpp"

namespace cleave::supervise {

// --launcher's words, else srun inside a SLURM allocation, else mpiexec.
std::vector<std::string> launcher_words(const SuperviseOptions& options);

// The launcher, checked before the first attempt: one that cannot start fails every attempt at once (exit 127), and
// the supervisor would spend its restart budget and re-plan each time before saying so. Throws InputError (`cleave run`
// exits 64, as for its other bad options).
void check_launcher(const SuperviseOptions& options);

// The job of attempt `attempt` on the slots `used` (their count is the world): the launcher, `cleave train` with the
// config, the overrides and `extra` (the restarts' layout and checkpoint interval), --resume (and from the second
// attempt on --restart-record `restart_file`); its log in `dir`. Writes `dir`/hosts.attempt_N when
// options.use_hostfile asks for one.
JobSpec attempt_job(const SuperviseOptions& options, const std::string& dir, const std::vector<Slot>& used,
                    const std::vector<std::string>& extra, int attempt, const std::optional<std::string>& restart_file);

// A line that says the job failed, as it streams in (the detection moment).
bool names_a_failure(const std::string& text);

struct AttemptRun {
  int exit_code = 0;
  std::string output;        // everything the job printed
  double fault_at = 0;       // when a fault injection announced itself (unix seconds; 0: none seen)
  double detected_at = 0;    // when a failure line streamed in (0: none seen)
  double ended_at = 0;       // when the last process of the job was gone
  bool forwarded = false;    // a SIGTERM was forwarded to the ranks as SIGUSR1
};

// Starts the job and watches it to its end. `sigterm` (set by the supervisor's signal handler) is forwarded once to
// the ranks as SIGUSR1 through the launcher; after a failure line the launcher gets teardown_grace_s to end the job
// before the supervisor ends its process group.
AttemptRun watch_job(const JobSpec& spec, double teardown_grace_s, const std::atomic<bool>& sigterm);

// Seconds since the Unix epoch, the clock of every record.
double unix_now();

}  // namespace cleave::supervise
