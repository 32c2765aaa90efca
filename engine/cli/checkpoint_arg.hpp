// The checkpoint a command's CHECKPOINT argument names (cleave generate, cleave export): the directory itself when
// it holds index.json, else the newest step_NNNNNNN/ under it (a checkpoint root; engine/checkpoint/read_source.hpp
// says which one and what a damaged newest one turns into). Invariant: a Hugging Face model directory, or a
// directory with no step, is refused before any work, naming the path (bad input: InputError, exit 64; a run
// directory's refusal names its checkpoints/).
#pragma once

#include <string>
#include <string_view>

#include "engine/checkpoint/read_source.hpp"

namespace cleave::cli {

// `command` prefixes the "not a checkpoint" message ("export"); `hf_refusal` is the whole message for a Hugging
// Face model directory (it names the conversion the command wants: cleave import ...).
checkpoint::ReadSource checkpoint_read_source(std::string_view command, const std::string& source,
                                              const std::string& hf_refusal);

}  // namespace cleave::cli
