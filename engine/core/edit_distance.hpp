// Levenshtein edit distance, for "did you mean ...?" suggestions (config keys, enum names, schedule names).
#pragma once

#include <cstddef>
#include <string_view>

namespace cleave {

// Insertions, deletions and substitutions turning `a` into `b`. O(|a| × |b|) time, O(|b|) memory.
std::size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace cleave
