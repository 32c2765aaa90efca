// The moe family at the layers' level: its block (layers/moe/moe_block.hpp: llama attention, a mixture-of-experts
// feed-forward; tp > 1: heads and every expert's SwiGLU columns split). The router's kind and coefficients are
// the family's config (spec.moe).
#include "layers/families/family_layers.hpp"
#include "layers/moe/moe_block.hpp"

namespace cleave::layers {
namespace {

LayerPtr build_moe_block(const partition::BlockSpec& b, const partition::ModelSpec& spec, const ParamInit& init,
                         int tp_size, int tp_rank, const ExpertLayout& ep) {
  return make_moe_block(b, spec.moe, init, tp_size, tp_rank, ep.size, ep.rank);
}

}  // namespace

BlockLayers moe_block_layers() { return {partition::BlockKind::kMoeBlock, build_moe_block}; }

}  // namespace cleave::layers
