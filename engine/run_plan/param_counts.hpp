// One tp rank's parameter counts, the unit every memory-plan category of parameters, gradients, optimizer state,
// ZeRO buckets and ZeRO-3 units is built from. Invariant: the replicated parameters (norms, row-parallel biases,
// learned positions, a router: BlockCost::replicated_param_count) are counted whole on every tp rank, the rest ÷ tp,
// and a vocab-parallel table (embedding, lm head) as ceil(V / tp) rows, as layers/parallel/shard.hpp pads it.
#pragma once

#include <cstdint>

#include "partition/cost_model.hpp"

namespace cleave::run_plan {

// One tp rank's parameters of a block.
std::int64_t tp_rank_param_count(const partition::BlockSpec& block, const partition::BlockCost& cost, int tp);

// One tp rank's elements of a tied token table (vocab-parallel: ceil(V / tp) rows), 0 when untied.
std::int64_t tp_rank_table_count(const partition::ModelSpec& spec, int tp);

// One tp rank's elements of a block that go into its ZeRO-2 bucket or ZeRO-3 unit: tp_rank_param_count less the
// tied table (`table` elements when the block `holds_table`: its own unit or bucket, or the embedding's) and, at
// ep > 1, the routed experts (split over tp, in the expert-dp bucketer).
std::int64_t tp_rank_own_count(const partition::BlockSpec& block, const partition::BlockCost& cost, int tp,
                               std::int64_t table, bool holds_table, int ep);

}  // namespace cleave::run_plan
