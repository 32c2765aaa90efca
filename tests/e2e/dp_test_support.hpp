// What the data-parallel tests (dp_*_test.cpp, one binary: e2e_data_parallel_test under mpiexec -n 2 and -n 4)
// share: the tolerance of the layouts that reorder a sum, the override that makes many tiny gradient buckets,
// the pipeline-size override, and random token ids for the tests that drive a stage by hand.
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "engine/core/allocator.hpp"
#include "engine/core/tensor.hpp"

namespace cleave::testing {

// Tolerance for the pp layouts (5e-6 relative, the bound pipeline_equivalence_test.cpp uses; observed
// <= 1.5e-6 after 6 SGD steps). SGD with momentum is the default because AdamW turns rounding noise in
// exactly-zero gradients into lr-sized steps; AdamW is compared where results are bit-identical.
inline constexpr double kRounding = 5e-6;
// parallel.dp_bucket_mb = 0.01: the 3072-float attention weights get a bucket each, about 40 buckets per rank.
inline const std::string kTinyBuckets = "parallel.dp_bucket_mb=0.01";

inline std::string pp(int p) { return "parallel.pipeline_model_parallel_size=" + std::to_string(p); }

// Deterministic random token ids in [0, vocab) for this rank.
inline Tensor random_tokens(std::int64_t rows, std::int64_t cols, std::int64_t vocab, unsigned seed) {
  Tensor t = Tensor::empty({rows, cols}, DType::kI32, MemoryCategory::kActivations, cpu_allocator());
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(0, static_cast<int>(vocab) - 1);
  for (auto& v : t.span<std::int32_t>()) v = dist(gen);
  return t;
}

}  // namespace cleave::testing
