// Memory plan: what one rank will hold, by allocator category, before anything is allocated — so a model
// that does not fit under device.memory_limit is refused with the numbers instead of failing mid-step.
//
// Estimate per pp rank (parameters, gradients and optimizer state ÷ tp; activations are one tp rank's, the
// cost model's tp layout: LayerNorm and column-parallel inputs whole, the rest sharded; ZeRO-1 divides
// optimizer state by dp):
//   parameters       Σ param bytes of the rank's stages (a tied table counted once per rank)
//   gradients        = parameters (train.deterministic: x (1 + floor(log2 micro-batches)), the partial sums)
//   optimizer_state  adamw 2x, sgd with momentum 1x, plain sgd 0x of parameters (÷ dp with ZeRO-1)
//   activations      the peak, over the rank's actions in schedule order, of the stashes held: F adds a
//                    stage's forward stash (cost model: exactly what forward() keeps under train.recompute),
//                    I trades it for what W needs (weight_stash_bytes: inputs and output gradients of the
//                    weights), W or a fused B frees it, and a recomputed block's rebuilt stash counts on top
//                    while its I runs (a fused B: the most one block holds beyond its forward stash, as B runs
//                    each block's I then W); × micro-batch; plus boundary tensors in flight (two receives
//                    posted ahead, and sends until they complete: at most one per live micro-batch). Not
//                    counted: the gradients a block's backward holds while it runs (GELU's input and output
//                    gradients, 2·T·d_ff per sample), which the stash estimate's slack has so far covered
//   workspace        2 × the largest block output of a micro-batch (transient outputs and gradients); under
//                    bf16 on the CPU at least the widest kernel's operands widened to f32
// It is an estimate; the allocator's cap still enforces the real limit at run time, and the measured peaks
// (metrics.jsonl peak_bytes) show how close it was.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "engine/config/config.hpp"
#include "engine/core/allocator.hpp"
#include "engine/train/plan.hpp"

namespace cleave::train {

struct MemoryPlan {
  std::array<std::int64_t, kNumMemoryCategories> bytes{};
  std::int64_t total() const;
  std::string breakdown() const;  // "parameters 1.2 MiB, gradients ..., total ..."
};

MemoryPlan estimate_rank_memory(const Plan& plan, const config::RunConfig& config, int pp_rank);

// The message for the first pp rank whose estimate exceeds device.memory_limit (naming the rank, the
// bytes by category, the cap and what to change), or an empty string when every rank fits or no cap is set.
std::string memory_plan_violation(const Plan& plan, const config::RunConfig& config);

}  // namespace cleave::train
