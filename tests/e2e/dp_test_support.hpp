// What the data-parallel tests (dp_*_test.cpp, one binary: e2e_data_parallel_test under mpiexec -n 2 and -n 4)
// share: the tolerance of the layouts that reorder a sum, the override that makes many tiny gradient buckets,
// the pipeline-size override, random token ids for the tests that drive a stage by hand, and a run's memory in
// the steady state beside its memory plan.
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "engine/comm/communicator.hpp"
#include "engine/config/config.hpp"
#include "engine/core/allocator.hpp"
#include "engine/core/tensor.hpp"
#include "engine/run_plan/memory_plan.hpp"
#include "engine/train/trainer.hpp"
#include "support/layout_overrides.hpp"

namespace cleave::testing {

// Tolerance for the pp layouts: kRounding (support/layout_overrides.hpp, with pp(); observed <= 1.5e-6 after 6
// SGD steps). SGD with momentum is the default because AdamW turns rounding noise in exactly-zero gradients into
// lr-sized steps; AdamW is compared where results are bit-identical.
// parallel.dp_bucket_mb = 0.01: the 3072-float attention weights get a bucket each, about 40 buckets per rank.
inline const std::string kTinyBuckets = "parallel.dp_bucket_mb=0.01";

// Deterministic random token ids in [0, vocab) for this rank.
inline Tensor random_tokens(std::int64_t rows, std::int64_t cols, std::int64_t vocab, unsigned seed) {
  Tensor t = Tensor::empty({rows, cols}, DType::kI32, MemoryCategory::kActivations, cpu_allocator());
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(0, static_cast<int>(vocab) - 1);
  for (auto& v : t.span<std::int32_t>()) v = dist(gen);
  return t;
}

// The steady state of a run: a fresh Trainer's step 0, the peaks reset, step 1; the allocator's counters then (peaks
// over step 1, current after it) beside the memory plan of pp rank 0. Collective over `world`.
struct SteadyMemory {
  MemoryStats stats;
  run_plan::MemoryPlan plan;
};
inline SteadyMemory steady_state_memory(const config::RunConfig& config, comm::Communicator& world) {
  train::Trainer trainer(config, world);
  trainer.step(0);
  trainer.reset_peak_memory();
  trainer.step(1);
  return {trainer.memory_stats(), run_plan::estimate_rank_memory(trainer.plan(), trainer.config(), 0)};
}

}  // namespace cleave::testing
