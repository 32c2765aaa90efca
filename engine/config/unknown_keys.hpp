// Unknown config keys: the keys a config holds that no reader asked for (ParseState::unknown), reported together in
// one error line, grouped by where they came from (the file or a --set argument), each with a hint: the note a
// reader left (a key of another model type), the nearest known key, or the keys its section knows.
// Internal to engine/config.
#pragma once

#include "engine/config/parse_state.hpp"

namespace cleave::config {

// Throws when `state` recorded any unknown key; returns otherwise.
void report_unknown_keys(const ParseState& state);

}  // namespace cleave::config
