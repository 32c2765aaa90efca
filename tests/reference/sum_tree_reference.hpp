// Test reference for the canonical summation order of deterministic mode (engine/core/sum_tree.hpp), written
// from its definition and sharing no code with the library: the f32 sum of terms [lo, hi) is the sum of the
// left part (the largest power of two below the count) plus the sum of the rest, left first.
#pragma once

#include <cstddef>
#include <vector>

namespace cleave::testing {

// term(i) gives term i as a float.
template <typename Term>
float canonical_sum_reference(std::size_t lo, std::size_t hi, const Term& term) {
  if (hi - lo == 1) return term(lo);
  std::size_t left = 1;
  while (2 * left < hi - lo) left *= 2;
  const float a = canonical_sum_reference(lo, lo + left, term);
  const float b = canonical_sum_reference(lo + left, hi, term);
  return a + b;
}

inline float canonical_sum_reference(const std::vector<float>& terms, std::size_t lo, std::size_t hi) {
  return canonical_sum_reference(lo, hi, [&terms](std::size_t i) { return terms[i]; });
}

}  // namespace cleave::testing
