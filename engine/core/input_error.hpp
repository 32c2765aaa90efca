// InputError: bad input on the command line or in the config it names, found while reading them, before any work:
// an unknown or ill-formed option, an unknown config key (a file's, a --set's, a --allow-config-change's), a value
// of the wrong type or out of range, a cross-key rule of the config. Running the same command again cannot cure it,
// so main() ends the process with ExitCode::kBadInput (engine/core/exit_code.hpp) and `cleave run` stops at once on
// that code (engine/supervise/recovery_policy.hpp).
//
// Invariant: the readers throw it (engine/cli/args.cpp, engine/config/config.cpp, engine/train/config_change.cpp); a
// check on a config value made later, once the world size or a checkpoint is known, stays a plain Error (exit 1).
#pragma once

#include <string>

#include "engine/core/error.hpp"

namespace cleave {

class InputError : public Error {
 public:
  explicit InputError(const std::string& message) : Error(message) {}
};

}  // namespace cleave
