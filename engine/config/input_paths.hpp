// Input paths of a config that is written to a file for a later run. Invariant: the written file names the
// same input files as the config it was made from, wherever the file lies.
#pragma once

#include "engine/config/config.hpp"

namespace cleave::config {

// Before `config` is written to a file for a later run (cleave plan --write, --trial): its input paths
// (data.path, data.val_path, data.paths) made absolute against the working directory. A relative one came from
// --set (load_config makes the file's absolute) and would otherwise be read relative to the written file's
// directory. Defined in config.cpp beside resolve_input_paths.
void make_input_paths_absolute(RunConfig& config);

}  // namespace cleave::config
