// The layer builders of the family-owned block kinds (see family_layers.hpp): one explicit row per kind.
#include "engine/core/error.hpp"
#include "layers/families/family_layers.hpp"

#include <array>

namespace cleave::layers {
namespace {

const std::array<BlockLayers, 3>& rows() {
  static const std::array<BlockLayers, 3> table = [] {
    const std::array<BlockLayers, 3> t = {gpt_block_layers(), llama_block_layers(), moe_block_layers()};
    for (const BlockLayers& row : t) {
      CLEAVE_ASSERT(row.build != nullptr && partition::family_block_rules(row.kind) != nullptr,
                    "layer table row '{}' has no build function or no partition block rules",
                    partition::block_kind_name(row.kind));
    }
    return t;
  }();  // immutable after the first call
  return table;
}

}  // namespace

const BlockLayers* family_block_layers(partition::BlockKind kind) {
  for (const BlockLayers& row : rows()) {
    if (row.kind == kind) return &row;
  }
  CLEAVE_ASSERT(partition::family_block_rules(kind) == nullptr,
                "block kind '{}' is family-owned in partition's table but has no layer builder in layers/families",
                partition::block_kind_name(kind));
  return nullptr;
}

}  // namespace cleave::layers
