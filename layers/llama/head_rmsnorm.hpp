// HeadRmsNorm: RMSNorm over each attention head's hd columns, one learned scale "<prefix>.weight" [hd] shared by
// every head (init 1, not weight-decayed): x [B, T, L·hd] viewed as [B·T·L, hd] rows, y = x / sqrt(mean(x²) +
// eps) · weight (Qwen3's q_norm and k_norm, applied to q and k before the rotary embedding).
//
// Tensor parallelism: this rank's L heads are a share of the model's, so its weight gradient is a partial sum
// over the tp group. Without sequence parallelism each micro-batch's share is all-reduced over tp in
// backward_weight (hd floats), so the gradient is the one-rank gradient on every rank; under sequence
// parallelism the trainer's once-per-step sum of replicated gradients (sum_replicated_grads_over_tp) already
// sums it, so this layer does not. Invariant: after a step, weight.grad equals the one-rank block's.
//
// Stash after forward: {x, rstd (f32 [B·T·L])}; after backward_input: {x, rstd, dy}. backward_weight
// accumulates dweight, then clears.
#pragma once

#include <memory>
#include <string>

#include "layers/layer.hpp"
#include "layers/param_init.hpp"

namespace cleave::layers {

class HeadRmsNorm final : public Layer {
 public:
  HeadRmsNorm(std::string prefix, std::int64_t head_dim, float eps, const ParamInit& init, int tp_size, int tp_rank);

  std::string_view kind() const override { return "head_rmsnorm"; }
  Tensor forward(const Tensor& x, Stash& stash, Context& ctx) override;
  Tensor backward_input(const Tensor& dy, Stash& stash, Context& ctx) override;
  void backward_weight(Stash& stash, Context& ctx) override;
  std::vector<std::shared_ptr<Param>> params() const override { return {weight_}; }

 private:
  std::string who() const { return "head rmsnorm " + prefix_; }
  Shape rows_of(const Tensor& x) const;  // [B·T·L, hd], checking that hd divides the last dimension

  std::string prefix_;
  std::int64_t head_dim_;
  float eps_;
  int tp_size_, tp_rank_;
  std::shared_ptr<Param> weight_;
};

}  // namespace cleave::layers
