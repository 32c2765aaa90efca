// A request to save and stop, from a signal: SIGUSR1, the preemption notice `cleave run` forwards to every rank
// (through mpirun or srun) when it receives SIGTERM. `cleave train` installs the handler; the training loop reads
// the flag once per step, inside the step's existing all-reduce, so every rank sees a request that reached any of
// them at the same step, saves a checkpoint of that step and ends (exit code 0 on every rank: under mpirun one
// rank's non-zero exit ends its peers; `cleave run` itself exits kStoppedExitCode, docs/multi-rank.md).
//
// Process-wide state, deliberately: a signal handler can reach only static storage. It is one atomic flag, set by
// the handler and read by the loop; nothing else is kept.
#pragma once

#include "engine/core/exit_code.hpp"

namespace cleave::train {

// Installs the SIGUSR1 handler (idempotent).
void install_stop_request_handler();
// Whether SIGUSR1 arrived since the process started.
bool stop_requested();

// The exit code of `cleave run` when its job stopped on SIGTERM after saving a checkpoint (EX_TEMPFAIL: try again
// later).
inline constexpr int kStoppedExitCode = exit_status(ExitCode::kStopped);

}  // namespace cleave::train
