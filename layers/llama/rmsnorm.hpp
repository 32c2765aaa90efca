// RmsNorm over the last dimension with a learned scale "<prefix>.weight" [dim] (init 1, not weight-decayed):
// y = x / sqrt(mean(x^2) + eps) * weight (Llama's norm; transformers' LlamaRMSNorm). Replicated under
// tensor parallelism (its input and dy are replicated, so its gradient is too).
//
// Stash after forward: {x, rstd (f32 [rows])}; after backward_input: {x, rstd, dy}. backward_weight
// accumulates dweight, then clears. The residual forms (residual_norm.hpp) run ops::add_rmsnorm_* with the same
// stash: {r = branch + residual, rstd}, then dy.
#pragma once

#include <memory>
#include <string>

#include "layers/layer.hpp"
#include "layers/param_init.hpp"
#include "layers/residual_norm.hpp"

namespace cleave::layers {

class RmsNorm final : public Layer, public ResidualNorm {
 public:
  RmsNorm(std::string prefix, std::int64_t dim, float eps, const ParamInit& init);

  std::string_view kind() const override { return "rmsnorm"; }
  Tensor forward(const Tensor& x, Stash& stash, Context& ctx) override;
  Tensor backward_input(const Tensor& dy, Stash& stash, Context& ctx) override;
  void backward_weight(Stash& stash, Context& ctx) override;
  Tensor forward_residual(const Tensor& branch, const Tensor& residual, Stash& stash, Context& ctx) override;
  Tensor backward_input_residual(const Tensor& dy, const Tensor& dresidual, Stash& stash, Context& ctx) override;
  std::vector<std::shared_ptr<Param>> params() const override { return {weight_}; }

 private:
  const std::string& who() const { return who_; }
  std::string make_who() const { return "rmsnorm " + prefix_; }

  std::string prefix_;
  std::int64_t dim_;
  float eps_;
  std::shared_ptr<Param> weight_;
  std::string who_ = make_who();  // last: built once from the members above, so no call builds a string
};

}  // namespace cleave::layers
