// SharedInputParts: several projections that read ONE input (llama's q, k, v; gate and up), run together.
//
// Under sequence parallelism each ColumnParallelLinear would all-gather the same input shard in forward and
// in backward_weight and reduce-scatter its own partial input gradient; here the shard is all-gathered once
// per pass for all parts and their partial input gradients are accumulated into one [B, T, in] buffer (GEMM
// beta = 1) before ONE reduce-scatter: a third (q, k, v) or a half (gate, up) of the collectives, one [B, T, in]
// partial instead of one per part. The parameters, their names and shapes and the forward values are those of
// the parts run one by one; the input gradient differs only in the order of the tp sum.
//
// Without sequence parallelism at tp > 1 the parts' partial input gradients are accumulated the same way before ONE
// all-reduce of [B, T, in] (Megatron's fused qkv and gate/up projections post one too): 2 all-reduces per llama
// block's backward where each part's own made 5 (tests/support/tp_collectives.hpp counts them).
//
// Otherwise (tp 1, or a part that is not a ColumnParallelLinear) each part runs on its own: forward in order,
// input gradients summed in part order, weight gradients in order.
//
// Invariant: stashes[i] is parts[i]'s stash; all parts' forward saw the same x (so their stashed shards are one
// tensor). Lists are spans over the caller's fixed arrays: a call allocates no list.
#pragma once

#include <span>
#include <vector>

#include "layers/layer.hpp"

namespace cleave::layers {

class ColumnParallelLinear;

class SharedInputParts {
 public:
  explicit SharedInputParts(std::vector<Layer*> parts);

  // Each part's output for input x, into out[i].
  void forward(const Tensor& x, std::span<Stash* const> stashes, std::span<Tensor> out, Context& ctx) const;
  // Σ_i dx of part i for output gradient dys[i].
  Tensor backward_input(std::span<const Tensor> dys, std::span<Stash* const> stashes, Context& ctx) const;
  void backward_weight(std::span<Stash* const> stashes, Context& ctx) const;

 private:
  bool shared(const Context& ctx) const;     // sequence parallelism: one gather and one reduce-scatter
  bool sums_once() const;                    // tp > 1: one reduction of the summed partial input gradients

  std::vector<Layer*> parts_;
  std::vector<ColumnParallelLinear*> columns_;  // the same parts when all are column-parallel, else empty
};

}  // namespace cleave::layers
