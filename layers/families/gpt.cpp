// The gpt family at the layers' level: its transformer block (layers/transformer_block.hpp; tp > 1: heads and
// MLP columns split Megatron-style, layers/parallel/parallel_transformer_block.hpp). GPT-2 initialisation
// scales the residual projections by 1 / sqrt(2 · n_layers), so the build reads the family's n_layers.
#include "layers/families/family_layers.hpp"
#include "layers/parallel/parallel_transformer_block.hpp"
#include "layers/transformer_block.hpp"

namespace cleave::layers {
namespace {

LayerPtr build_transformer_block(const partition::BlockSpec& b, const partition::ModelSpec& spec, const ParamInit& init,
                                 int tp_size, int tp_rank, const ExpertLayout&) {
  if (tp_size > 1) {
    return make_parallel_transformer_block(b.name, b.in_features, b.n_heads, b.d_ff, spec.gpt.n_layers, init, tp_size,
                                           tp_rank);
  }
  return std::make_unique<TransformerBlock>(b.name, b.in_features, b.n_heads, b.d_ff, spec.gpt.n_layers, init);
}

}  // namespace

BlockLayers gpt_block_layers() { return {partition::BlockKind::kTransformerBlock, build_transformer_block}; }

}  // namespace cleave::layers
