// See param_tensors.hpp. The common kinds' tensors (their layers: layers/embedding.cpp, layers/layernorm.cpp,
// layers/llama/rmsnorm.cpp, layers/linear.cpp, layers/conv2d.cpp, layers/lm_head.cpp and their vocab-parallel forms
// in layers/parallel/); a family-owned kind asks its row of the family table.
#include "partition/param_tensors.hpp"

#include "engine/core/error.hpp"
#include "partition/families/family.hpp"

namespace cleave::partition {

std::vector<ParamTensor> block_param_tensors(const BlockSpec& block, int tp) {
  CLEAVE_ASSERT(tp >= 1, "block_param_tensors: tp {} for block {}", tp, block.name);
  if (const BlockRules* rules = family_block_rules(block.kind)) return rules->param_tensors(block, tp);
  const auto table = [tp](std::int64_t vocab, std::int64_t d) {  // ceil(V / tp) rows (layers/parallel/shard.hpp)
    return ParamTensor{(vocab + tp - 1) / tp * d, ParamRole::kTokenTable};
  };
  switch (block.kind) {
    case BlockKind::kEmbedding: {
      std::vector<ParamTensor> out = {table(block.vocab_size, block.out_features)};
      if (block.seq_len > 0) out.push_back({block.seq_len * block.out_features});  // learned positions, replicated
      return out;
    }
    case BlockKind::kLayerNorm: return {{block.in_features}, {block.in_features}};  // weight, bias (replicated)
    case BlockKind::kRmsNorm: return {{block.in_features}};
    case BlockKind::kLmHead: return {table(block.vocab_size, block.in_features)};
    // Not split by tensor parallelism (their families have no tp rules).
    case BlockKind::kLinear: return {{block.in_features * block.out_features}, {block.out_features}};
    case BlockKind::kConv2d:
      return {{block.out_features * block.in_features * block.kernel * block.kernel}, {block.out_features}};
    default: return {};
  }
}

}  // namespace cleave::partition
