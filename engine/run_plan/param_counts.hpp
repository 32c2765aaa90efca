// One tp rank's parameter counts, the unit every memory-plan category of parameters, gradients, optimizer state,
// ZeRO buckets and ZeRO-3 units is built from. Invariant: the replicated parameters (norms, row-parallel biases,
// learned positions, a router: BlockCost::replicated_param_count) are counted whole on every tp rank, the rest ÷ tp,
// and a vocab-parallel table (embedding, lm head) as ceil(V / tp) rows, as layers/parallel/shard.hpp pads it.
#pragma once

#include <cstdint>

#include "partition/cost_model.hpp"
#include "partition/model_spec.hpp"

namespace cleave::run_plan {

// One tp rank's parameters of a block.
std::int64_t tp_rank_param_count(const partition::BlockSpec& block, const partition::BlockCost& cost, int tp);

// One tp rank's elements of a tied token table (vocab-parallel: ceil(V / tp) rows), 0 when untied.
std::int64_t tp_rank_table_count(const partition::ModelSpec& spec, int tp);

// The 64-byte alignment of each gradient inside a bucket, in f32 elements (engine/comm/gradient_bucket_layout.cpp).
constexpr std::int64_t kBucketAlignElements = 16;

// One tp rank's f32 elements of a block's own parameters in its ZeRO-2 bucket or ZeRO-3 unit, each tensor from a
// 64-byte boundary (partition::block_param_tensors, aligned_elements): all its tensors but the tied table when the
// block `holds_table` (its own unit or bucket, or the embedding's) and, at ep > 1, the routed experts (in the
// expert-dp bucketer: tp_rank_expert_elements).
std::int64_t tp_rank_own_elements(const partition::BlockSpec& block, int tp, bool holds_table, int ep);

// ep > 1: one tp rank's f32 elements of the block's routed experts on its ep rank (E / ep of them) in their expert-dp
// unit, each tensor aligned as above; 0 at ep 1 or for a block without experts.
std::int64_t tp_rank_expert_elements(const partition::BlockSpec& block, int tp, int ep);

}  // namespace cleave::run_plan
