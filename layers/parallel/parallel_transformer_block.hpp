// The transformer block split across the tp group (Megatron): this tp rank's parts of CausalSelfAttention,
// Mlp and TransformerBlock. The composites themselves are the one-rank classes; only their parts differ.
//
//  - attention: qkv ColumnParallelLinear ("<prefix>.qkv", D -> 3D, groups 3) -> causal attention over this
//    rank's H / tp heads -> proj RowParallelLinear ("<prefix>.proj", D -> D). tp rank r holds heads
//    [r·H/tp, (r+1)·H/tp): rows of those heads from each of the q, k and v blocks of the logical [3D, D]
//    QKV weight (ShardSpec{dim 0, groups 3}), and the matching input columns of the output projection.
//  - mlp: fc ColumnParallelLinear ("<prefix>.fc", D -> F, output features split) -> GELU on the local
//    F / tp columns -> proj RowParallelLinear ("<prefix>.proj", F -> D, all-reduced output).
//  - block: replicated LayerNorms and residuals around the two. x, x1, y and both LayerNorms are
//    replicated on every tp rank; because the row-parallel outputs are all-reduced in forward and the
//    column-parallel input gradients in backward, every replicated tensor (activations, dy of the
//    LayerNorms, hence their gradients and the row-parallel biases' gradients) is the same on every tp
//    rank: no extra all-reduce is needed to keep the replicated parameters in step.
// Communication: attention and mlp all-reduce once in forward (proj output) and once in backward_input
// (dx of qkv / fc), so four all-reduces per block per micro-batch; backward_weight communicates nothing.
// Sequence parallelism (Context::sequence_parallel): the same parts switch mode, the block is unchanged.
// x, x1, y and both LayerNorms then hold this rank's T/tp tokens; qkv and fc all-gather their input and
// reduce-scatter dx, the projections reduce-scatter their output and all-gather dy, so each all-reduce above
// becomes a reduce-scatter plus an all-gather and backward_weight all-gathers qkv's and fc's input shards
// again. The LayerNorms' and the projections' bias gradients are then partial over tp (tp_util.hpp).
//
// Parameter names, shapes of the logical tensors and initial values equal the one-rank layers' (residual
// projections start at std init.std / sqrt(2·n_layers)); stash layouts are theirs, with H / tp heads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "layers/attention.hpp"
#include "layers/mlp.hpp"
#include "layers/param_init.hpp"
#include "layers/transformer_block.hpp"

namespace cleave::layers {

// n_heads must be divisible by tp_size (tp_layout.hpp says which tp sizes are allowed).
std::unique_ptr<CausalSelfAttention> make_parallel_attention(const std::string& prefix, std::int64_t d_model,
                                                             std::int64_t n_heads, const ParamInit& init,
                                                             const ParamInit& proj_init, int tp_size, int tp_rank);

// d_ff must be divisible by tp_size.
std::unique_ptr<Mlp> make_parallel_mlp(const std::string& prefix, std::int64_t d_model, std::int64_t d_ff,
                                       const ParamInit& init, const ParamInit& proj_init, int tp_size, int tp_rank);

// n_heads and d_ff must be divisible by tp_size (tp_layout.hpp).
std::unique_ptr<TransformerBlock> make_parallel_transformer_block(const std::string& prefix, std::int64_t d_model,
                                                                  std::int64_t n_heads, std::int64_t d_ff,
                                                                  std::int64_t n_layers, const ParamInit& init,
                                                                  int tp_size, int tp_rank);

}  // namespace cleave::layers
