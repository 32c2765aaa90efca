// Layer builders: turn a contiguous range of a ModelSpec's blocks into CPU layers, one Layer per BlockSpec.
//
// Invariants:
//  - build_blocks(spec, a, b) builds exactly blocks [a, b), in order; layer i consumes block a+i's input
//    shape (with a leading batch dimension) and produces its output shape.
//  - Parameter names and initial values depend only on (seed, logical name): any split of the same spec
//    into ranges (pipeline stages) yields the same set of named tensors with identical values.
//  - Tied embeddings: when the embedding block and the tied head are in the same range, the head shares
//    the embedding's token Param. When they are in different ranges the head creates its own Param named
//    "embed.token" with the same initial values; the two copies must then have their gradients summed
//    (all-reduced over the embedding group) before every optimizer step so they stay equal — that is the
//    trainer's job, not the builder's.
//  - Initialisation: gpt uses GPT-2 style (normal 0.02, residual projections 0.02 / sqrt(2·n_layers),
//    biases 0, norms 1 / 0); llama normal 0.02 everywhere (transformers' initializer_range), norms 1;
//    mlp and cnn use PyTorch's defaults (uniform ±1/sqrt(fan_in)).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/core/allocator.hpp"
#include "layers/layer.hpp"
#include "partition/cost_model.hpp"
#include "partition/model_spec.hpp"

namespace cleave::layers {

struct BuildOptions {
  std::uint64_t seed = 1234;
  Allocator* allocator = nullptr;  // where parameters and gradients live; null = cpu_allocator()
  // A tied head whose embedding is outside the range uses this table when set: the embedding was built
  // in another range held by the same rank (ZB-V puts the first and last stage on rank 0), so both must
  // share one Param. Unset: the head creates its own copy (to be kept equal by the embedding group).
  std::shared_ptr<Param> tied_table;
  // Tensor parallelism (Megatron style, layers/parallel/). tp_size > 1 builds this tp rank's shards of a gpt
  // (a llama likewise: llama block -> make_llama_block's shards, final rmsnorm replicated):
  // embedding -> VocabParallelEmbedding, transformer block -> TransformerBlock with head-parallel attention
  // and a column/row-parallel MLP (make_parallel_transformer_block), lm head -> VocabParallelLmHead (tied:
  // shares the vocab-parallel embedding's token shard, or tied_table, or makes its own copy of that shard,
  // by the rules above), loss -> VocabParallelCrossEntropy; the final layernorm stays replicated. Every
  // Param keeps its logical name and describes its slice in Param::shard; its values are that slice of the
  // tp_size = 1 build. The layers read the tp communicator from Context::tp_comm. Layouts the model cannot
  // split (mlp, cnn, n_heads or d_ff not divisible by tp) are refused before anything is built
  // (layers/parallel/tp_layout.hpp).
  int tp_size = 1;
  int tp_rank = 0;
  // Expert parallelism (parallel.expert_model_parallel_size): a moe block builds experts
  // [ep_rank · E / ep_size, (ep_rank + 1) · E / ep_size) only, with the values of the ep 1 build's slice.
  int ep_size = 1;
  int ep_rank = 0;
  // Activation recomputation of transformer blocks (partition/cost_model.hpp): none, selective (attention
  // statistics rebuilt in backward) or full (only each block's input kept; layers/recomputed.hpp).
  partition::Recompute recompute = partition::Recompute::kNone;
};

// One Layer per block in [first_block, last_block). Throws Error for an empty or out-of-range block range.
std::vector<LayerPtr> build_blocks(const partition::ModelSpec& spec, std::size_t first_block,
                                   std::size_t last_block, const BuildOptions& options = {});

// The Params of `layers`, in layer order, each shared Param (a tied table) listed once.
std::vector<std::shared_ptr<Param>> collect_params(const std::vector<LayerPtr>& layers);

}  // namespace cleave::layers
