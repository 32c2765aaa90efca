// InputError: bad input on the command line or in the config it names, found while reading them, before any work:
// an unknown or ill-formed option, an unknown config key (a file's, a --set's, a --allow-config-change's), a value
// of the wrong type or out of range, a cross-key rule of the config. Running the same command again cannot cure it,
// so main() ends the process with ExitCode::kBadInput (engine/core/exit_code.hpp) and `cleave run` stops at once on
// that code (engine/supervise/recovery_policy.hpp).
//
// Invariant: the readers throw it (engine/cli/args.cpp, engine/config/config.cpp,
// engine/train/checkpoint/config_change.cpp), and so do the checks of `train --init-from` that set the config against
// the weights it names (engine/train/checkpoint/weight_source.cpp: a model key that differs, model.seq_len above the
// model's maximum; engine/cli/init_tokenizer_check.cpp: data of another tokenizer), made before the world is built, and
// the data readers for a data file that cannot serve the run (engine/train/data: missing, malformed, too short, ids
// past the vocabulary; checked before the world where no token needs reading, check_data_files), RunConfig::
// resolve's rules of the config against the world size (a pure function of both: every rank finds them alike, and
// `cleave train` runs them first), the output path checks made before work (engine/core/output_path.hpp: an output
// that exists or cannot be written) and reading_input below (an --init-from or import directory whose files do not
// agree), a --resume that names no checkpoint or one of weights only (engine/train/checkpoint/resume_fallback.cpp,
// checkpoint_load.cpp), a tensor an --init-from source lacks or holds non-finite (weight_source.cpp: load_weights,
// whose collective keeps the type: checkpoint_pieces.hpp), and the plan the config makes at the world size with its
// memory plan against device.memory_limit (run_plan::make_plan; `cleave train` makes it before the world,
// train::plan_before_world); a check made later, once a checkpoint to resume is known, stays a plain Error
// (exit 1) or the checkpoint's own type.
#pragma once

#include <string>
#include <typeinfo>

#include "engine/core/error.hpp"

namespace cleave {

class InputError : public Error {
 public:
  explicit InputError(const std::string& message) : Error(message) {}
};

// Runs `read`, which reads a file or directory the command line names before any work (an --init-from directory,
// import's HF_DIR), and rethrows a plain Error it throws as InputError: the file is what is wrong, and reading it
// again cannot cure it. An Error subclass with an exit code of its own (a checkpoint's damage) is rethrown as it is.
template <typename Read>
decltype(auto) reading_input(Read&& read) {
  try {
    return read();
  } catch (const InputError&) {
    throw;
  } catch (const Error& e) {
    if (typeid(e) != typeid(Error)) throw;
    throw InputError(e.what());
  }
}

}  // namespace cleave

// CLEAVE_CHECK for bad input (throws InputError): a rule the command line, its config or the files they name break.
#define CLEAVE_CHECK_INPUT(cond, ...)                                     \
  do {                                                                  \
    if (!(cond)) [[unlikely]] {                                         \
      throw ::cleave::InputError(::fmt::format(__VA_ARGS__));           \
    }                                                                   \
  } while (0)
