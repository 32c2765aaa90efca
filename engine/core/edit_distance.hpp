// Levenshtein edit distance, for "did you mean ...?" suggestions (config keys, enum names, schedule names).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace cleave {

// Insertions, deletions and substitutions turning `a` into `b`. O(|a| × |b|) time, O(|b|) memory.
std::size_t edit_distance(std::string_view a, std::string_view b);

// The closest of `candidates` to `word` by edit distance when within max(2, |word| / 3), a likely typo; "" otherwise.
std::string closest_spelling(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace cleave
