// Layer builders from a ModelSpec (see builder.hpp).
#include "layers/activation.hpp"
#include "layers/models/builder.hpp"

#include <unordered_set>

#include "engine/core/error.hpp"
#include "layers/conv2d.hpp"
#include "layers/embedding.hpp"
#include "layers/flatten.hpp"
#include "layers/layernorm.hpp"
#include "layers/linear.hpp"
#include "layers/families/family_layers.hpp"
#include "layers/llama/rmsnorm.hpp"
#include "layers/lm_head.hpp"
#include "layers/maxpool.hpp"
#include "layers/param_init.hpp"
#include "layers/recomputed.hpp"
#include "layers/parallel/tp_layout.hpp"
#include "layers/parallel/tp_util.hpp"
#include "layers/parallel/vocab_parallel_cross_entropy.hpp"
#include "layers/parallel/vocab_parallel_embedding.hpp"
#include "layers/parallel/vocab_parallel_lm_head.hpp"
#include "layers/softmax_cross_entropy.hpp"
#include "layers/transformer_block.hpp"

namespace cleave::layers {

using partition::BlockKind;
using partition::BlockSpec;
using partition::ModelSpec;

namespace {

// train.recompute applied to a family's repeated layer, GPT's or Llama's block (layers/recomputed.hpp,
// RecomputableScores).
LayerPtr with_recompute(LayerPtr block, partition::Recompute recompute) {
  if (recompute == partition::Recompute::kSelective) {
    auto* transformer = dynamic_cast<TransformerBlock*>(block.get());
    CLEAVE_ASSERT(transformer != nullptr, "selective recomputation of a {}", block->kind());
    transformer->set_selective_recompute(true);
  } else if (recompute == partition::Recompute::kFull) {
    return std::make_unique<RecomputedLayer>(std::move(block));
  }
  return block;
}


// The embedding block's name prefix (a tied head on another stage names its table copy after it).
std::string embedding_prefix(const ModelSpec& spec) {
  for (const BlockSpec& b : spec.blocks) {
    if (b.kind == BlockKind::kEmbedding) return b.name;
  }
  CLEAVE_THROW("model spec '{}' has a tied lm head but no embedding block", spec.type);
}

// The table a tied lm head uses (builder.hpp): the token table of the embedding in this range when there
// is one (`in_range`), else BuildOptions::tied_table, else its own copy. With tp > 1 every choice is this
// tp rank's vocabulary shard.
std::shared_ptr<Param> tied_head_table(const ModelSpec& spec, const BlockSpec& head,
                                       const std::shared_ptr<Param>& in_range, const BuildOptions& options,
                                       const ParamInit& init) {
  const int tp = options.tp_size, rank = options.tp_rank;
  if (in_range) return in_range;
  if (options.tied_table) {
    const ShardSpec& s = options.tied_table->shard;
    CLEAVE_CHECK(tp == 1 || (s.dim == 0 && s.parts == tp && s.index == rank),
                 "build_blocks: the tied table '{}' passed in BuildOptions::tied_table is not vocabulary shard "
                 "{} of {} (dim {}, index {} of {})",
                 options.tied_table->name, rank, tp, s.dim, s.index, s.parts);
    return options.tied_table;
  }
  if (tp > 1) {
    return make_vocab_parallel_token_table(embedding_prefix(spec), head.vocab_size, head.in_features, init, tp, rank);
  }
  return make_token_table(embedding_prefix(spec), head.vocab_size, head.in_features, init);
}

// A norm block: the same layer in every layout (its parameters are replicated across tp ranks).
LayerPtr norm_block(const BlockSpec& b, const ParamInit& init) {
  if (b.kind == BlockKind::kLayerNorm) return std::make_unique<LayerNorm>(b.name, b.in_features, init);
  return std::make_unique<RmsNorm>(b.name, b.in_features, static_cast<float>(b.norm_eps), init);
}

// A common block's layer for tp_size > 1 (a gpt or llama, checked by build_blocks): this tp rank's shard.
// `token_table` is the embedding's table once the range has built it (a tied head in the range uses it).
LayerPtr tensor_parallel_common_block(const ModelSpec& spec, const BlockSpec& b, const BuildOptions& options,
                                      const ParamInit& init, std::shared_ptr<Param>& token_table) {
  const int tp = options.tp_size, rank = options.tp_rank;
  switch (b.kind) {
    case BlockKind::kEmbedding: {
      auto layer =
          std::make_unique<VocabParallelEmbedding>(b.name, b.vocab_size, b.seq_len, b.out_features, init, tp, rank);
      token_table = layer->token_table();
      return layer;
    }
    case BlockKind::kLayerNorm:
    case BlockKind::kRmsNorm:
      return norm_block(b, init);
    case BlockKind::kLmHead: {
      auto weight = b.tied ? tied_head_table(spec, b, token_table, options, init)
                           : make_vocab_parallel_table(b.name + ".weight", b.vocab_size, b.in_features, init.std,
                                                       init, tp, rank);
      return std::make_unique<VocabParallelLmHead>(b.name, std::move(weight), b.tied, tp, rank);
    }
    case BlockKind::kSoftmaxCrossEntropy:
      return std::make_unique<VocabParallelCrossEntropy>(b.vocab_size, tp, rank);
    default:
      CLEAVE_ASSERT(false, "build_blocks: block '{}' ({}) has no tensor-parallel version (check_tensor_parallel "
                    "admits only the families that can be split)", b.name, partition::block_kind_name(b.kind));
  }
}

// A common block's layer for one rank (tp_size 1); `token_table` as above.
LayerPtr common_block(const ModelSpec& spec, const BlockSpec& b, const BuildOptions& options, const ParamInit& init,
                      std::shared_ptr<Param>& token_table) {
  switch (b.kind) {
    case BlockKind::kEmbedding: {
      auto layer = std::make_unique<Embedding>(b.name, b.vocab_size, b.seq_len, b.out_features, init);
      token_table = layer->token_table();
      return layer;
    }
    case BlockKind::kLayerNorm:
    case BlockKind::kRmsNorm:
      return norm_block(b, init);
    case BlockKind::kLmHead: {
      std::shared_ptr<Param> weight;
      if (b.tied) {
        weight = tied_head_table(spec, b, token_table, options, init);
      } else {
        weight = make_param(b.name + ".weight", Shape{b.out_features, b.in_features}, true, init.allocator);
        init_normal(*weight, init.seed, init.std);
      }
      return std::make_unique<LmHead>(b.name, std::move(weight), b.tied);
    }
    case BlockKind::kLinear: return std::make_unique<Linear>(b.name, b.in_features, b.out_features, true, init);
    case BlockKind::kRelu: return std::make_unique<Relu>(b.name);
    case BlockKind::kGelu: return std::make_unique<Gelu>(b.name);
    case BlockKind::kConv2d: return std::make_unique<Conv2d>(b.name, b.in_features, b.out_features, b.kernel, init);
    case BlockKind::kMaxPool: return std::make_unique<MaxPool>(b.name, b.input[1], b.input[2], b.kernel);
    case BlockKind::kFlatten: return std::make_unique<Flatten>(b.input);
    case BlockKind::kSoftmaxCrossEntropy: return std::make_unique<SoftmaxCrossEntropy>();
    default:
      CLEAVE_ASSERT(false, "build_blocks: block '{}' ({}) is neither a common kind nor in layers/families' table",
                    b.name, partition::block_kind_name(b.kind));
  }
}

}  // namespace

std::vector<LayerPtr> build_blocks(const ModelSpec& spec, std::size_t first_block, std::size_t last_block,
                                   const BuildOptions& options) {
  CLEAVE_CHECK(first_block < last_block && last_block <= spec.blocks.size(),
               "build_blocks: block range [{}, {}) is empty or outside the model's {} blocks", first_block,
               last_block, spec.blocks.size());
  ParamInit init{options.allocator};
  init.seed = options.seed;
  // gpt and llama: normal(0, 0.02) (llama: transformers' initializer_range, no residual scaling).
  init.scheme = partition::is_language_model(spec.type) ? InitScheme::kGpt2 : InitScheme::kTorchDefault;
  init.std = 0.02f;
  check_tensor_parallel(spec, options.tp_size);
  check_tp_coordinates(options.tp_size, options.tp_rank, "build_blocks");

  std::vector<LayerPtr> layers;
  std::shared_ptr<Param> token_table;  // of the embedding in this range
  for (std::size_t i = first_block; i < last_block; ++i) {
    const BlockSpec& b = spec.blocks[i];
    if (const BlockLayers* family = family_block_layers(b.kind)) {
      layers.push_back(with_recompute(
          family->build(b, spec, init, options.tp_size, options.tp_rank, {options.ep_size, options.ep_rank}),
          options.recompute));
    } else if (options.tp_size > 1) {
      layers.push_back(tensor_parallel_common_block(spec, b, options, init, token_table));
    } else {
      layers.push_back(common_block(spec, b, options, init, token_table));
    }
  }
  return layers;
}

std::vector<std::shared_ptr<Param>> collect_params(const std::vector<LayerPtr>& layers) {
  std::vector<std::shared_ptr<Param>> out;
  std::unordered_set<const Param*> seen;
  for (const LayerPtr& layer : layers) {
    for (auto& p : layer->params()) {
      if (seen.insert(p.get()).second) out.push_back(p);
    }
  }
  return out;
}

}  // namespace cleave::layers
