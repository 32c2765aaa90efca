// Benchmark operands: n floats drawn uniformly from [-1, 1) by a seeded mt19937, the same draws for the same
// (n, seed) on every machine, so two benchmarks (or two runs of one) time the same inputs.
#pragma once

#include <cstddef>
#include <random>
#include <vector>

namespace cleave::bench {

inline std::vector<float> random_vec(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

}  // namespace cleave::bench
