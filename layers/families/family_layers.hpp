// The model-family table at the layers' level: for each block kind a family owns (partition/families/
// family.hpp BlockRules), the function that builds its layer for one tensor-parallel rank.
// layers/models/builder.cpp asks this table for a family-owned kind and builds the common kinds (embedding,
// norms, head, loss, linear, activations, conv, pool, flatten) itself.
//
// A family's home at this level is layers/families/<family>.cpp: its build function, registered by an
// explicit row in table.cpp (no static self-registration). Its layers themselves may live in their own folder
// (layers/llama/) or with the common layers (layers/transformer_block.*).
//
// Invariants: every family-owned BlockKind of partition's block table has a row here (checked on first use);
// `build` returns the layer of tp rank tp_rank of tp_size (tp_size 1: the whole block) whose Params carry
// their logical names and the values of the tp_size = 1 build's slice (layers/models/builder.hpp). Recomputation
// (train.recompute) is applied by the builder around what `build` returns; the layer must therefore be a
// TransformerBlock (selective recomputation) or any Layer (full).
#pragma once

#include "layers/layer.hpp"
#include "layers/param_init.hpp"
#include "partition/model_spec.hpp"

namespace cleave::layers {

// Expert parallelism (BuildOptions::ep_size, ep_rank): which slice of a block's experts this rank builds. Only
// families with experts read it.
struct ExpertLayout {
  int size = 1;
  int rank = 0;
};

struct BlockLayers {
  partition::BlockKind kind{};
  // Required. The family's config is the ModelSpec's (spec.gpt.n_layers for gpt's residual init scale).
  LayerPtr (*build)(const partition::BlockSpec& block, const partition::ModelSpec& spec, const ParamInit& init,
                    int tp_size, int tp_rank, const ExpertLayout& ep) = nullptr;
};

// The row of a family-owned kind; null for a common kind.
const BlockLayers* family_block_layers(partition::BlockKind kind);

// The families' rows (layers/families/<family>.cpp).
BlockLayers gpt_block_layers();
BlockLayers llama_block_layers();
BlockLayers moe_block_layers();

}  // namespace cleave::layers
