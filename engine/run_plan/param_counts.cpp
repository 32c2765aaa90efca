// See param_counts.hpp.
#include "engine/run_plan/param_counts.hpp"

#include "partition/param_tensors.hpp"

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

std::int64_t tp_rank_own_elements(const partition::BlockSpec& block, int tp, bool holds_table, int ep) {
  using partition::ParamRole;
  return partition::aligned_elements(partition::block_param_tensors(block, tp), kBucketAlignElements,
                                     [&](const partition::ParamTensor& t) {
                                       if (t.role == ParamRole::kTokenTable) return !holds_table;
                                       return t.role != ParamRole::kRoutedExperts || ep == 1;
                                     });
}

std::int64_t tp_rank_expert_elements(const partition::BlockSpec& block, int tp, int ep) {
  if (ep <= 1) return 0;
  return partition::aligned_elements(
      partition::block_param_tensors(block, tp), kBucketAlignElements,
      [](const partition::ParamTensor& t) { return t.role == partition::ParamRole::kRoutedExperts; }, ep);
}

}  // namespace cleave::run_plan
