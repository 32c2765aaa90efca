// ParallelCausalSelfAttention: CausalSelfAttention with its heads split across the tp group (Megatron).
//
// x [B, T, D] (replicated) -> qkv ColumnParallelLinear ("<prefix>.qkv", D -> 3D, groups 3) -> causal
// attention over this rank's H / tp heads -> proj RowParallelLinear ("<prefix>.proj", D -> D) -> y
// [B, T, D] (replicated). tp rank r holds heads [r·H/tp, (r+1)·H/tp): rows of those heads from each of the
// q, k and v blocks of the logical [3D, D] QKV weight (ShardSpec{dim 0, groups 3}), and the matching input
// columns of the output projection. Communication: one all-reduce in forward (proj output), one in
// backward_input (dx of qkv). Names and initial values equal CausalSelfAttention's.
//
// Stash layout: as CausalSelfAttention (tensors {qkv_local, probs [B, H/tp, T, T]}, children {qkv, proj}).
#pragma once

#include <memory>
#include <string>

#include "layers/layer.hpp"
#include "layers/param_init.hpp"
#include "layers/parallel/column_parallel_linear.hpp"
#include "layers/parallel/row_parallel_linear.hpp"

namespace cleave::layers {

class ParallelCausalSelfAttention final : public Layer {
 public:
  // n_heads must be divisible by tp_size (tp_layout.hpp says which tp sizes are allowed).
  ParallelCausalSelfAttention(std::string prefix, std::int64_t d_model, std::int64_t n_heads, const ParamInit& init,
                              const ParamInit& proj_init, int tp_size, int tp_rank);

  std::string_view kind() const override { return "parallel_causal_self_attention"; }
  Tensor forward(const Tensor& x, Stash& stash, Context& ctx) override;
  Tensor backward_input(const Tensor& dy, Stash& stash, Context& ctx) override;
  void backward_weight(Stash& stash, Context& ctx) override;
  std::vector<std::shared_ptr<Param>> params() const override;

 private:
  std::string prefix_;
  std::int64_t d_model_, n_heads_, local_heads_;
  ColumnParallelLinear qkv_;
  RowParallelLinear proj_;
};

}  // namespace cleave::layers
