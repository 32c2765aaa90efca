// Layer builders from a ModelSpec (see builder.hpp).
#include "layers/models/builder.hpp"

#include <unordered_set>

#include "engine/core/error.hpp"
#include "layers/conv2d.hpp"
#include "layers/embedding.hpp"
#include "layers/flatten.hpp"
#include "layers/gelu.hpp"
#include "layers/layernorm.hpp"
#include "layers/linear.hpp"
#include "layers/lm_head.hpp"
#include "layers/maxpool.hpp"
#include "layers/param_init.hpp"
#include "layers/relu.hpp"
#include "layers/softmax_cross_entropy.hpp"
#include "layers/transformer_block.hpp"

namespace cleave::layers {

using partition::BlockKind;
using partition::BlockSpec;
using partition::ModelSpec;

namespace {

// The embedding block's name prefix (a tied head on another stage names its table copy after it).
std::string embedding_prefix(const ModelSpec& spec) {
  for (const BlockSpec& b : spec.blocks) {
    if (b.kind == BlockKind::kEmbedding) return b.name;
  }
  CLEAVE_THROW("model spec '{}' has a tied lm head but no embedding block", spec.type);
}

}  // namespace

std::vector<LayerPtr> build_blocks(const ModelSpec& spec, std::size_t first_block, std::size_t last_block,
                                   const BuildOptions& options) {
  CLEAVE_CHECK(first_block < last_block && last_block <= spec.blocks.size(),
               "build_blocks: block range [{}, {}) is empty or outside the model's {} blocks", first_block,
               last_block, spec.blocks.size());
  ParamInit init;
  init.seed = options.seed;
  init.allocator = options.allocator;
  init.scheme = spec.type == "gpt" ? InitScheme::kGpt2 : InitScheme::kTorchDefault;
  init.std = 0.02f;

  std::vector<LayerPtr> layers;
  const Embedding* embedding = nullptr;  // in this range
  for (std::size_t i = first_block; i < last_block; ++i) {
    const BlockSpec& b = spec.blocks[i];
    switch (b.kind) {
      case BlockKind::kEmbedding: {
        auto layer = std::make_unique<Embedding>(b.name, b.vocab_size, b.seq_len, b.out_features, init);
        embedding = layer.get();
        layers.push_back(std::move(layer));
        break;
      }
      case BlockKind::kTransformerBlock:
        layers.push_back(std::make_unique<TransformerBlock>(b.name, b.in_features, b.n_heads, b.d_ff,
                                                            spec.gpt.n_layers, init));
        break;
      case BlockKind::kLayerNorm:
        layers.push_back(std::make_unique<LayerNorm>(b.name, b.in_features, init));
        break;
      case BlockKind::kLmHead: {
        std::shared_ptr<Param> weight;
        if (b.tied && embedding != nullptr) {
          weight = embedding->token_table();
        } else if (b.tied && options.tied_table) {
          weight = options.tied_table;
        } else if (b.tied) {
          weight = make_token_table(embedding_prefix(spec), b.vocab_size, b.in_features, init);
        } else {
          weight = make_param(b.name + ".weight", Shape{b.out_features, b.in_features}, true, init.alloc());
          init_normal(*weight, init.seed, init.std);
        }
        layers.push_back(std::make_unique<LmHead>(b.name, std::move(weight), b.tied));
        break;
      }
      case BlockKind::kLinear:
        layers.push_back(std::make_unique<Linear>(b.name, b.in_features, b.out_features, true, init));
        break;
      case BlockKind::kRelu: layers.push_back(std::make_unique<Relu>(b.name)); break;
      case BlockKind::kGelu: layers.push_back(std::make_unique<Gelu>(b.name)); break;
      case BlockKind::kConv2d:
        layers.push_back(std::make_unique<Conv2d>(b.name, b.in_features, b.out_features, b.kernel, init));
        break;
      case BlockKind::kMaxPool:
        layers.push_back(std::make_unique<MaxPool>(b.name, b.input[1], b.input[2], b.kernel));
        break;
      case BlockKind::kFlatten: layers.push_back(std::make_unique<Flatten>(b.input)); break;
      case BlockKind::kSoftmaxCrossEntropy: layers.push_back(std::make_unique<SoftmaxCrossEntropy>()); break;
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
