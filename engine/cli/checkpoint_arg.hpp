// The checkpoint a command's CHECKPOINT argument names (cleave generate, cleave export): the directory itself when
// it holds index.json, else the latest complete step_NNNNNNN/ under it (a checkpoint.dir). Invariant: what is
// returned holds index.json; a Hugging Face model directory, or a directory with no complete step, is refused
// before any work, naming the path.
#pragma once

#include <string>
#include <string_view>

namespace cleave::cli {

// `command` prefixes the "not a checkpoint" message ("export"); `hf_refusal` is the whole message for a Hugging
// Face model directory (it names the conversion the command wants: cleave import ...).
std::string checkpoint_step_dir(std::string_view command, const std::string& source, const std::string& hf_refusal);

}  // namespace cleave::cli
