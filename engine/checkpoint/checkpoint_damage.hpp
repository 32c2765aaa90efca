// CheckpointDamage: the Error a checkpoint reader throws when a checkpoint's bytes are not what its writer wrote
// (a file missing, cut short or of another size, a checksum that does not match, an index.json that does not
// parse or fails its own checksum). Any other Error about a checkpoint (another model, a refused config change,
// a checkpoint beyond train.steps) is not damage: the checkpoint is intact and the run is what does not fit it.
//
// Invariant: the type is the whole distinction. `--resume auto` falls back to an older checkpoint on
// CheckpointDamage only (engine/train/checkpoint/resume_fallback.hpp); every other Error stops the run as before.
// The message names the file (its path holds the step directory), and what is wrong, with the numbers.
//
// NoIntactCheckpoint: `--resume auto` found checkpoints and every one damaged. CheckpointMismatch: the checkpoint
// is intact and the run does not fit it (a config change `--resume` refuses, another model, seed, global batch or
// optimizer, a step beyond train.steps). No restart can cure either, so `cleave train` exits with its own code for
// each (ExitCode, engine/core/exit_code.hpp; engine/cli/main.cpp) and `cleave run` stops at once on those codes
// instead of spending its restart budget (engine/supervise/recovery_policy.hpp).
#pragma once

#include <exception>
#include <string>

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "engine/core/exit_code.hpp"
#include "engine/core/input_error.hpp"
#include "engine/core/one_line.hpp"

namespace cleave::checkpoint {

class CheckpointDamage : public Error {
 public:
  explicit CheckpointDamage(const std::string& message) : Error(message) {}
};

class NoIntactCheckpoint : public Error {
 public:
  explicit NoIntactCheckpoint(const std::string& message) : Error(message) {}
};

class CheckpointMismatch : public Error {
 public:
  explicit CheckpointMismatch(const std::string& message) : Error(message) {}
};

// The exit code a command's error ends the process with: ExitCode::kNoIntactCheckpoint for NoIntactCheckpoint,
// kCheckpointMismatch for CheckpointMismatch, kBadInput for InputError (engine/core/error.hpp), else kError.
inline int exit_code_of(const std::exception& error) {
  if (dynamic_cast<const InputError*>(&error) != nullptr) return exit_status(ExitCode::kBadInput);
  if (dynamic_cast<const NoIntactCheckpoint*>(&error) != nullptr) return exit_status(ExitCode::kNoIntactCheckpoint);
  if (dynamic_cast<const CheckpointMismatch*>(&error) != nullptr) return exit_status(ExitCode::kCheckpointMismatch);
  return exit_status(ExitCode::kError);
}

// For a reader's outermost catch: rethrows `error` on one line (rethrow_one_line), keeping CheckpointDamage's type.
[[noreturn]] inline void rethrow_one_line_keeping_damage(const Error& error) {
  if (dynamic_cast<const CheckpointDamage*>(&error) != nullptr) {
    const std::string line = escape_control(error.what());
    if (line == error.what()) throw;
    throw CheckpointDamage(line);
  }
  rethrow_one_line(error);
}

}  // namespace cleave::checkpoint

// CLEAVE_CHECK for a checkpoint's bytes: throws CheckpointDamage.
#define CLEAVE_CHECK_INTACT(cond, ...)                                               \
  do {                                                                               \
    if (!(cond)) [[unlikely]] {                                                      \
      throw ::cleave::checkpoint::CheckpointDamage(::fmt::format(__VA_ARGS__));      \
    }                                                                                \
  } while (0)

// CLEAVE_CHECK for whether the run fits an intact checkpoint: throws CheckpointMismatch.
#define CLEAVE_CHECK_FITS(cond, ...)                                                 \
  do {                                                                               \
    if (!(cond)) [[unlikely]] {                                                      \
      throw ::cleave::checkpoint::CheckpointMismatch(::fmt::format(__VA_ARGS__));    \
    }                                                                                \
  } while (0)
