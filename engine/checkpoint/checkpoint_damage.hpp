// CheckpointDamage: the Error a checkpoint reader throws when a checkpoint's bytes are not what its writer wrote
// (a file missing, cut short or of another size, a checksum that does not match, an index.json that does not
// parse or fails its own checksum). Any other Error about a checkpoint (another model, a refused config change,
// a checkpoint beyond train.steps) is not damage: the checkpoint is intact and the run is what does not fit it.
//
// Invariant: the type is the whole distinction. `--resume auto` falls back to an older checkpoint on
// CheckpointDamage only (train/resume_fallback.hpp); every other Error stops the run as before. The message
// names the file (its path holds the step directory), and what is wrong, with the numbers.
#pragma once

#include <string>

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "engine/core/one_line.hpp"

namespace cleave::checkpoint {

class CheckpointDamage : public Error {
 public:
  explicit CheckpointDamage(const std::string& message) : Error(message) {}
};

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
