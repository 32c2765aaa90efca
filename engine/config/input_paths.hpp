// Where a config's input files are: resolve_input_paths makes them absolute (docs/config.md, "Paths").
//
// Invariant: a config load_config returns names every input file (data.path, data.val_path, each data.paths entry)
// by absolute path, so the run's config.json names the same files from any working directory (`cleave train
// runs/x/config.json` elsewhere reads what the original command read).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "engine/config/config.hpp"

namespace cleave::config {

// Makes the input files `c` names absolute: a relative path the file at `config_path` gives (`file_text`: its JSON
// text, "" for none) against the file's directory, any other (a --set value, a default such as digits'
// data/digits.csv.gz, a config without a file) against the working directory. Empty paths stay empty; output paths
// (train.out_dir, checkpoint.dir) are left relative to the working directory. load_config runs it; a reader that
// builds the config from the file's JSON itself (train --init-from's, engine/train/checkpoint/weight_source.cpp)
// runs it too.
void resolve_input_paths(RunConfig& c, const std::string& config_path, std::string_view file_text,
                         const std::vector<std::string>& overrides);

}  // namespace cleave::config
