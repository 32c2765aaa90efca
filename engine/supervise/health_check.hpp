// `cleave run --health-check CMD`: the user's shell command run once per slot after a failure, with
// CLEAVE_SLOT_HOST and CLEAVE_SLOT_INDEX in its environment; a non-zero exit drops the slot.
// Invariant: CMD reaches `sh -c` as one word exactly as given (quotes, $ and spaces included): the line
// health_check_line builds single-quotes every value it splices into the shell text.
#pragma once

#include <string>
#include <vector>

#include "engine/core/executable.hpp"  // shell_quote
#include "engine/supervise/recovery_policy.hpp"

namespace cleave::supervise {

// The shell line that runs `command` for `slot` (its output discarded).
std::string health_check_line(const std::string& command, const Slot& slot);

// Whether each slot passes `command` (every slot does when it is empty); a failing slot is logged as dropped.
std::vector<bool> check_health(const std::string& command, const std::vector<Slot>& slots);

}  // namespace cleave::supervise
