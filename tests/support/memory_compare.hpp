// The memory plan against the allocator, for the e2e memory tests: a config trained its config.train.steps steps
// in a fresh Trainer, then the allocator's peaks by category (MemoryStats) beside the memory plan of one pp rank
// (run_plan::estimate_rank_memory on the config resolved for this world, with this process's CPU kernels as the
// trainer's own plan: the GEMM choice for bf16 operands, the threads), so a test states only its model, its layout
// and its bound. Every rank of `world` calls it (the steps are collective). forced_routing_imbalance gives an
// expert-parallel rank's exact imbalance under model.forced_routing, the figure the plan takes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/config/config.hpp"
#include "engine/core/allocator.hpp"
#include "engine/run_plan/memory_plan.hpp"
#include "engine/train/trainer.hpp"
#include "engine/train/rank_setup.hpp"
#include "layers/moe/forced_routing.hpp"
#include "partition/ep_costs.hpp"

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
  // This process's CPU kernels (GEMM choice for bf16 operands, threads), as the trainer's own plan reads them.
  return {trainer.memory_stats(),
          run_plan::estimate_rank_memory(trainer.plan(), resolved, pp_rank, train::cpu_kernels_of(config))};
}

// Under model.forced_routing `workload` (every source rank routes alike): the rows ep rank `ep_rank`'s experts run
// in a micro-batch of `tokens` tokens (micro-batch size × seq_len), max over steps [first_step, last_step), over
// the mean rows (tokens × top_k): the rank's exact imbalance, estimate_rank_memory's ep_imbalance.
inline double forced_routing_imbalance(const std::string& workload, std::int64_t experts, std::int64_t top_k,
                                       std::int64_t tokens, int ep, int ep_rank, std::int64_t first_step,
                                       std::int64_t last_step) {
  const partition::ForcedRouting f = partition::forced_routing(workload, experts, top_k);
  double most = 0;
  for (std::int64_t step = first_step; step < last_step; ++step) {
    const auto slots = layers::forced_experts(f, step, tokens, experts, top_k);
    const partition::EpTraffic t =
        partition::ep_traffic(std::vector<std::vector<std::int32_t>>(static_cast<std::size_t>(ep), slots), experts, ep);
    most = std::max(most, static_cast<double>(t.computed(ep_rank)) / static_cast<double>(tokens * top_k));
  }
  return most;
}

}  // namespace cleave::testing
