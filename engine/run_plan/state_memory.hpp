// The memory plan's parameters, gradients and optimizer state of one pp rank under every ZeRO stage, reduced per
// step or per micro-batch, with the bf16 gradient twins (communication). Invariant: every figure is one tp rank's
// (param_counts.hpp), sharded over dp × cp ranks (ZeRO) or, for the routed experts, over expert-dp; the gradient
// buckets, ZeRO-1/2's flat parameter buffers and ZeRO-3's units are counted as the gradient bucketer lays them out.
#pragma once

#include <cstdint>

#include "engine/config/config.hpp"
#include "engine/run_plan/memory_plan.hpp"
#include "engine/run_plan/plan.hpp"

namespace cleave::run_plan {

// Sets m's parameters, gradients, optimizer state, gradients_between_steps and (bf16 gradient wire) communication.
// param_bytes: f32 bytes of the parameters one tp rank of this pp rank holds (all E experts, a tied table once);
// expert_bytes: f32 bytes of the routed experts of the rank's blocks (all E of each), ÷ tp.
void set_state_memory(MemoryPlan& m, const Plan& plan, const config::RunConfig& config, int pp_rank,
                      std::int64_t param_bytes, std::int64_t expert_bytes);

}  // namespace cleave::run_plan
