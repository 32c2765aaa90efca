// --set key.path=value: one command-line override applied to the config's JSON tree before any section is
// read, so an overridden key is checked exactly as one from the file. The value is parsed as JSON, and taken as
// a string when it is not JSON; missing sections on the path are created. The assignment is recorded in the
// ParseState, so errors about the key (or a key under it) name the --set argument instead of the file.
// Internal to engine/config.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "engine/config/parse_state.hpp"

namespace cleave::config {

// Throws on text that is not UTF-8, an assignment without '=', an empty path component, or a path through a
// value that is not a section.
void apply_set_override(nlohmann::json& root, const std::string& assignment, ParseState& state);

}  // namespace cleave::config
