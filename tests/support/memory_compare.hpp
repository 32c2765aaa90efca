// The memory plan against the allocator, for the e2e memory tests: a config trained its config.train.steps steps
// in a fresh Trainer, then the allocator's peaks by category (MemoryStats) beside the memory plan of one pp rank
// (run_plan::estimate_rank_memory on the config resolved for this world), so a test states only its model, its
// layout and its bound. Every rank of `world` calls it (the steps are collective).
#pragma once

#include <cstdint>

#include "engine/comm/communicator.hpp"
#include "engine/config/config.hpp"
#include "engine/core/allocator.hpp"
#include "engine/run_plan/memory_plan.hpp"
#include "engine/train/trainer.hpp"

namespace cleave::testing {

struct PlannedAndMeasured {
  MemoryStats measured;
  run_plan::MemoryPlan planned;
  std::int64_t measured_peak(MemoryCategory c) const { return measured.peak_of(c); }
  std::int64_t planned_peak(MemoryCategory c) const { return planned.bytes[static_cast<std::size_t>(c)]; }
};

inline PlannedAndMeasured train_against_plan(const config::RunConfig& config, comm::Communicator& world,
                                             int pp_rank = 0) {
  train::Trainer trainer(config, world);
  for (std::int64_t s = 0; s < config.train.steps; ++s) trainer.step(s);
  config::RunConfig resolved = config;
  resolved.resolve(world.size());
  return {trainer.memory_stats(), run_plan::estimate_rank_memory(trainer.plan(), resolved, pp_rank)};
}

}  // namespace cleave::testing
