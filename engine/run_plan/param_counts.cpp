// See param_counts.hpp.
#include "engine/run_plan/param_counts.hpp"

#include "partition/ep_costs.hpp"

namespace cleave::run_plan {

// One tp rank's parameters of a block: its replicated ones (norms, row-parallel biases, positions, a router) whole,
// the rest ÷ tp, a vocab-parallel table (embedding, lm head) as ceil(V / tp) rows (layers/parallel/shard.hpp pads
// the vocabulary to a multiple of tp). Before the replicated ones were divided by tp too: 1.1% under the measured
// parameters, gradients and optimizer state at ep2 x tp2 (ExpertParallel.MemoryPlanFollowsTheMeasuredPeakAtEpTimesTp).
std::int64_t tp_rank_param_count(const partition::BlockSpec& block, const partition::BlockCost& cost, int tp) {
  if (tp <= 1) return cost.param_count;
  std::int64_t split = cost.param_count - cost.replicated_param_count;
  std::int64_t table = 0;
  if (block.kind == partition::BlockKind::kEmbedding || block.kind == partition::BlockKind::kLmHead) {
    const std::int64_t d = block.kind == partition::BlockKind::kEmbedding ? block.out_features : block.in_features;
    split -= block.vocab_size * d;
    table = (block.vocab_size + tp - 1) / tp * d;
  }
  return cost.replicated_param_count + split / tp + table;
}

// One tp rank's elements of a tied token table (vocab-parallel: ceil(V / tp) rows), 0 when untied.
std::int64_t tp_rank_table_count(const partition::ModelSpec& spec, int tp) {
  if (spec.tied_parameters.empty()) return 0;
  return (spec.token_sizes().vocab_size + tp - 1) / tp * spec.token_sizes().d_model;
}

// One tp rank's elements of a block that go into its ZeRO-2 bucket or ZeRO-3 unit: tp_rank_param_count less the
// tied table (its own unit or bucket, or the embedding's) and, at ep > 1, the routed experts (split over tp, in
// the expert-dp bucketer).
std::int64_t tp_rank_own_count(const partition::BlockSpec& block, const partition::BlockCost& cost, int tp,
                               std::int64_t table, bool holds_table, int ep) {
  const std::int64_t experts = ep > 1 ? partition::expert_param_count(block) / tp : 0;
  return tp_rank_param_count(block, cost, tp) - (holds_table ? table : 0) - experts;
}

}  // namespace cleave::run_plan
