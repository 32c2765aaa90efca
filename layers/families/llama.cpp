// The llama family at the layers' level: its block (layers/llama/llama_block.hpp: RMSNorm, rotary
// grouped-query attention, SwiGLU; tp > 1: query and key/value heads and SwiGLU columns split).
#include "layers/families/family_layers.hpp"
#include "layers/llama/llama_block.hpp"

namespace cleave::layers {
namespace {

LayerPtr build_llama_block(const partition::BlockSpec& b, const partition::ModelSpec&, const ParamInit& init,
                           int tp_size, int tp_rank, const ExpertLayout&) {
  return make_llama_block(b, init, tp_size, tp_rank);
}

}  // namespace

BlockLayers llama_block_layers() { return {partition::BlockKind::kLlamaBlock, build_llama_block}; }

}  // namespace cleave::layers
