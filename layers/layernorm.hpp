// LayerNorm over the last dimension, with learned gamma ("<prefix>.weight", init 1) and beta
// ("<prefix>.bias", init 0), neither weight-decayed. eps 1e-5 as PyTorch.
//
// Stash after forward: {x, mean, rstd}; after backward_input: {x, mean, rstd, dy}. backward_weight
// accumulates dgamma and dbeta, then clears.
#pragma once

#include <memory>
#include <string>

#include "layers/layer.hpp"
#include "layers/param_init.hpp"

namespace cleave::layers {

class LayerNorm final : public Layer {
 public:
  LayerNorm(std::string prefix, std::int64_t dim, const ParamInit& init, float eps = 1e-5f);

  std::string_view kind() const override { return "layernorm"; }
  Tensor forward(const Tensor& x, Stash& stash, Context& ctx) override;
  Tensor backward_input(const Tensor& dy, Stash& stash, Context& ctx) override;
  void backward_weight(Stash& stash, Context& ctx) override;
  std::vector<std::shared_ptr<Param>> params() const override { return {gamma_, beta_}; }

 private:
  std::string prefix_;
  std::int64_t dim_;
  float eps_;
  std::shared_ptr<Param> gamma_;
  std::shared_ptr<Param> beta_;
  std::string who_ = "layernorm " + prefix_;  // built once: messages name the layer without a string per call
};

}  // namespace cleave::layers
