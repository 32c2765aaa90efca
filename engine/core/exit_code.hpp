// The exit codes of `cleave` commands, in one place: what a caller (a script, `cleave run`'s supervisor) may read
// from them. Invariant: a code other than kOk and kError names one cause only, and no restart of the same command
// over the same files cures the causes of kBadInput, kNoIntactCheckpoint and kCheckpointMismatch (the supervisor
// stops at once on them: engine/supervise/recovery_policy.hpp). Values follow BSD sysexits.h where one fits.
#pragma once

namespace cleave {

enum class ExitCode : int {
  kOk = 0,
  kError = 1,   // any other error (the message says which)
  kUsage = 2,   // no or an unknown command (before any command runs; the shells' usage code)
  // A command's own input is wrong: an unknown or ill-formed option, an unknown config key (in the file, a --set, a
  // --allow-config-change), a value of the wrong type or range, a cross-key rule of the config, a layout the world
  // size does not divide or cannot plan, a memory plan over device.memory_limit (cleave::InputError,
  // engine/core/input_error.hpp), found while reading the command line and the config, before any work. EX_USAGE (64), not EX_CONFIG (78): 78 is already the checkpoint's mismatch, and a
  // config is command-line input here (--set).
  kBadInput = 64,
  // `--resume` found checkpoints and every one damaged (checkpoint::NoIntactCheckpoint). EX_NOINPUT.
  kNoIntactCheckpoint = 66,
  // `cleave run`: its job stopped on SIGTERM after saving a checkpoint (train/stop_request.hpp). EX_TEMPFAIL.
  kStopped = 75,
  // The checkpoint is intact but the run does not fit it (checkpoint::CheckpointMismatch): a config change
  // `--resume` refuses, another model, seed, global batch or optimizer, a step beyond train.steps. EX_CONFIG.
  kCheckpointMismatch = 78,
};

constexpr int exit_status(ExitCode code) { return static_cast<int>(code); }

}  // namespace cleave
