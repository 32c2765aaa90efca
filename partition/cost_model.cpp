// Per-block cost model (formulas and counting rules in cost_model.hpp).
//
// The common block kinds are costed here from the small helpers of cost_parts.hpp (linear, layernorm, gelu,
// attention), which the layer structure mirrors; a family-owned kind (gpt's transformer block, llama's block)
// is costed by its family (partition/families/<family>_block.cpp), found through family_block_rules().
#include "partition/cost_model.hpp"

#include "engine/core/error.hpp"
#include "partition/cost_parts.hpp"

namespace cleave::partition {
namespace {

using namespace cost_parts;

// The figures of a common block kind (a family-owned kind has its own, family.hpp BlockRules).
Parts parts_of(const BlockSpec& b) {
  switch (b.kind) {
    case BlockKind::kEmbedding: {
      // Tokens from the input shape; learned positions only when seq_len > 0 (gpt; llama has none).
      const std::int64_t t = b.input.numel(), d = b.out_features, positions = b.seq_len;
      Parts p;
      p.fwd = positions > 0 ? static_cast<double>(t * d) : 0.0;
      p.wt = (positions > 0 ? 2.0 : 1.0) * static_cast<double>(t * d);
      p.params = b.vocab_size * d + positions * d;
      p.act_fixed = t * kStatBytes;
      return p;
    }
    case BlockKind::kRmsNorm: return rmsnorm(b.input.rows(), b.input.last());
    case BlockKind::kLayerNorm: return layernorm(b.input.rows(), b.input.last());
    case BlockKind::kLmHead: return linear(b.input.rows(), b.in_features, b.out_features, false);
    case BlockKind::kLinear: return linear(b.input.numel() / b.in_features, b.in_features, b.out_features, true);
    case BlockKind::kRelu: return relu(b.input.numel());
    case BlockKind::kGelu: return gelu(b.input.numel());
    case BlockKind::kConv2d: {
      const std::int64_t c = b.input[0], hw = b.input[1] * b.input[2], co = b.out_features, k = b.kernel;
      const double gemm = 2.0 * static_cast<double>(co) * static_cast<double>(hw) * static_cast<double>(c * k * k);
      Parts p;
      p.fwd = gemm + static_cast<double>(co * hw);
      p.in = gemm;
      p.wt = gemm + static_cast<double>(co * hw);
      p.params = co * c * k * k + co;
      p.act_float = c * hw;
      return p;
    }
    case BlockKind::kMaxPool: {
      const std::int64_t outputs = b.output.numel(), window = b.kernel * b.kernel;
      Parts p;
      p.fwd = static_cast<double>(outputs * window);
      p.in = static_cast<double>(outputs);
      p.act_fixed = outputs * kStatBytes;
      return p;
    }
    case BlockKind::kFlatten: return Parts{};
    case BlockKind::kSoftmaxCrossEntropy: {
      const std::int64_t rows = b.input.rows(), classes = b.input.last();
      Parts p;
      p.fwd = 4.0 * static_cast<double>(rows * classes);
      p.in = 3.0 * static_cast<double>(rows * classes);
      p.act_float = rows * classes;
      p.act_fixed = 2 * rows * kStatBytes;
      return p;
    }
    default: break;  // a family-owned kind: BlockRules::cost
  }
  CLEAVE_ASSERT(false, "block kind {} has no common cost figures (a family-owned kind asks its BlockRules)",
                block_kind_name(b.kind));
}

// Sequence parallelism (cost_model.hpp): one tp rank's activation, weight-stash and output bytes when the
// residual stream is split along the sequence. Every tensor the plain tp layout keeps whole becomes a
// [T / tp, ...] shard, except the output gradients a row-parallel linear all-gathers for its weight gradient
// (attention proj and fc2 keep dy [T, D] from I to W) and the embedding's gathered dy.
void sequence_parallel_share(const BlockSpec& block, BlockCost& cost, int tp, std::int64_t b) {
  const std::int64_t t = block.seq_len > 0 ? block.seq_len : block.input.rows(), ts = t / tp;
  switch (block.kind) {
    case BlockKind::kEmbedding: {
      // Tokens from the ids' shape [T]: seq_len is the learned positions' count, 0 for llama (which has none).
      const std::int64_t tokens = block.input.numel(), d = block.out_features;
      cost.output_bytes /= tp;
      cost.weight_stash_bytes = cost.activation_bytes + tokens * d * b + cost.output_bytes;  // ids, dy whole, shard
      break;
    }
    case BlockKind::kRmsNorm:
      cost.activation_bytes = ts * block.input.last() * b + ts * kStatBytes;
      cost.output_bytes /= tp;
      cost.weight_stash_bytes = cost.activation_bytes + cost.output_bytes;
      break;
    case BlockKind::kLayerNorm:
      cost.activation_bytes = ts * block.input.last() * b + 2 * ts * kStatBytes;
      cost.output_bytes /= tp;
      cost.weight_stash_bytes = cost.activation_bytes + cost.output_bytes;
      break;
    case BlockKind::kLmHead:
      cost.activation_bytes /= tp;  // the input shard (the gathered input is transient)
      cost.weight_stash_bytes = cost.activation_bytes + cost.output_bytes;
      cost.weight_extra_bytes = block.input.numel() * b;  // W gathers the input [T, D] again
      break;
    default: break;  // the loss: vocab-parallel logits of every token, as without sequence parallelism
  }
}

// BlockCost::backward_extra_bytes of a block whose other fields `cost` (one tp rank's) are set.
std::int64_t backward_extra(const BlockSpec& block, const BlockCost& cost, int tp, std::int64_t b,
                            bool sequence_parallel) {
  // A common block: dy and the input gradient it returns (none for token ids).
  const bool float_input = block.kind != BlockKind::kEmbedding;
  std::int64_t input = float_input ? block.input.numel() * b : 0;
  if (tp > 1 && block.kind == BlockKind::kSoftmaxCrossEntropy) input /= tp;  // vocab-parallel logits
  if (sequence_parallel && (block.kind == BlockKind::kLayerNorm || block.kind == BlockKind::kRmsNorm)) input /= tp;
  if (sequence_parallel && block.kind == BlockKind::kLmHead) input += input / tp;  // partial dx and its shard
  if (sequence_parallel && block.kind == BlockKind::kEmbedding) input = block.output.numel() * b;  // gathered dy
  return cost.output_bytes + input;
}

}  // namespace

BlockCost block_cost(const BlockSpec& block, DType dtype, Recompute recompute, int tp, bool sequence_parallel) {
  CLEAVE_CHECK(tp >= 1, "cost model: tensor-parallel width must be >= 1, got {}", tp);
  if (const BlockRules* rules = family_block_rules(block.kind)) {
    return rules->cost(block, dtype, recompute, tp, sequence_parallel);
  }
  const auto b = static_cast<std::int64_t>(dtype_size(dtype));
  BlockCost cost = base_cost(parts_of(block), b,
                             block.kind == BlockKind::kSoftmaxCrossEntropy ? 0 : block.output.numel() * b);
  switch (block.kind) {
    case BlockKind::kRmsNorm:
    case BlockKind::kEmbedding:
    case BlockKind::kLayerNorm:
    case BlockKind::kLmHead:
    case BlockKind::kLinear:
    case BlockKind::kConv2d:
      cost.weight_stash_bytes = cost.activation_bytes + cost.output_bytes;  // the forward stash and dy
      break;
    default: break;  // no weights: backward_input frees everything
  }
  // Under tp the final norm is replicated, and so is the embedding's position table (the token table is
  // vocab-parallel).
  if (block.kind == BlockKind::kRmsNorm || block.kind == BlockKind::kLayerNorm) {
    cost.replicated_param_count = cost.param_count;
  }
  if (block.kind == BlockKind::kEmbedding) cost.replicated_param_count = block.seq_len * block.out_features;
  if (tp > 1) {
    // One tp rank's share (see the header): only the sharded tensors divide.
    switch (block.kind) {
      case BlockKind::kLmHead:
        cost.output_bytes /= tp;
        cost.weight_stash_bytes = cost.activation_bytes + cost.output_bytes;
        break;
      case BlockKind::kSoftmaxCrossEntropy: {
        const std::int64_t rows = block.input.rows(), classes = block.input.last();
        cost.activation_bytes = rows * (classes / tp) * b + 2 * rows * kStatBytes;
        break;
      }
      default: break;  // embedding (ids; output whole after its all-reduce), final LayerNorm: replicated
    }
  }
  sequence_parallel = sequence_parallel && tp > 1;
  if (sequence_parallel) sequence_parallel_share(block, cost, tp, b);
  cost.backward_extra_bytes = backward_extra(block, cost, tp, b, sequence_parallel);
  return cost;
}

std::vector<BlockCost> model_costs(const ModelSpec& spec, DType dtype, Recompute recompute, int tp,
                                   bool sequence_parallel) {
  std::vector<BlockCost> costs;
  costs.reserve(spec.blocks.size());
  for (const BlockSpec& block : spec.blocks) {
    costs.push_back(block_cost(block, dtype, recompute, tp, sequence_parallel));
  }
  return costs;
}

TpBlockComm tp_block_comm(const BlockSpec& block, DType dtype, int tp, bool sequence_parallel, Recompute recompute) {
  CLEAVE_CHECK(tp >= 1, "cost model: tensor-parallel width must be >= 1, got {}", tp);
  TpBlockComm c;
  if (tp == 1) return c;
  if (const BlockRules* rules = family_block_rules(block.kind)) {
    return rules->tp_comm(block, dtype, tp, sequence_parallel, recompute);
  }
  const auto b = static_cast<std::int64_t>(dtype_size(dtype));
  const bool sp = sequence_parallel;
  using Op = Collective;
  constexpr TpBatching kEach = TpBatching::kPerSample;
  switch (block.kind) {
    case BlockKind::kEmbedding: {
      // The tokens from the ids' shape [T] (seq_len counts learned positions: 0 for llama).
      const std::int64_t stream = block.input.numel() * block.out_features * b;
      if (sp) {
        c.forward.push_back({Op::kReduceScatter, stream, kEach});
        c.input_grad.push_back({Op::kAllGather, stream, kEach});
      } else {
        c.forward.push_back({Op::kAllReduce, stream});
      }
      break;
    }
    case BlockKind::kLmHead: {
      const std::int64_t stream = block.input.rows() * block.in_features * b;
      if (sp) {
        c.forward.push_back({Op::kAllGather, stream, kEach});
        c.input_grad.push_back({Op::kReduceScatter, stream, kEach});
        c.weight_grad.push_back({Op::kAllGather, stream, kEach});
      } else {
        c.input_grad.push_back({Op::kAllReduce, stream});
      }
      break;
    }
    case BlockKind::kSoftmaxCrossEntropy:
      if (block.vocab_size > 0) {
        c.forward.push_back({Op::kAllReduce, block.input.rows() * kStatBytes});      // row maxima
        c.forward.push_back({Op::kAllReduce, 2 * block.input.rows() * kStatBytes});  // sums, target logits
      }
      break;
    default: break;  // the final norm: no collective (replicated, or a sequence shard)
  }
  return c;
}

void add_tp_region(TpBlockComm& c, std::int64_t stream, bool sequence_parallel, bool regathers_input) {
  using Op = Collective;
  constexpr TpBatching kEach = TpBatching::kPerSample;
  if (!sequence_parallel) {
    c.forward.push_back({Op::kAllReduce, stream});
    c.input_grad.insert(c.input_grad.begin(), {Op::kAllReduce, stream});
    return;
  }
  c.forward.push_back({Op::kAllGather, stream, kEach});      // the column-parallel input
  c.forward.push_back({Op::kReduceScatter, stream, kEach});  // the row-parallel output
  c.input_grad.insert(c.input_grad.begin(), {{Op::kAllGather, stream, kEach}, {Op::kReduceScatter, stream, kEach}});
  if (regathers_input) c.weight_grad.push_back({Op::kAllGather, stream, kEach});
}

std::int64_t unique_param_count(const ModelSpec& spec, std::size_t first_block, std::size_t last_block) {
  CLEAVE_CHECK(first_block < last_block && last_block <= spec.blocks.size(),
               "block range [{}, {}) is empty or outside the model's {} blocks", first_block, last_block,
               spec.blocks.size());
  std::int64_t count = 0;
  bool has_embedding = false;
  bool has_tied_head = false;
  std::int64_t table = 0;
  for (std::size_t i = first_block; i < last_block; ++i) {
    const BlockSpec& b = spec.blocks[i];
    const BlockRules* rules = family_block_rules(b.kind);
    count += rules != nullptr ? rules->cost(b, DType::kF32, Recompute::kNone, 1, false).param_count : parts_of(b).params;
    if (b.kind == BlockKind::kEmbedding) has_embedding = true;
    if (b.kind == BlockKind::kLmHead && b.tied) {
      has_tied_head = true;
      table = b.in_features * b.out_features;
    }
  }
  if (has_embedding && has_tied_head) count -= table;
  return count;
}

std::int64_t active_param_count(const ModelSpec& spec) {
  std::int64_t count = unique_param_count(spec, 0, spec.blocks.size());
  for (const BlockSpec& b : spec.blocks) {
    if (const BlockRules* rules = family_block_rules(b.kind); rules != nullptr) {
      count -= rules->cost(b, DType::kF32, Recompute::kNone, 1, false).inactive_param_count;
    }
  }
  return count;
}

}  // namespace cleave::partition
