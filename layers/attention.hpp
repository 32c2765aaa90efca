// CausalSelfAttention: x [B, T, D] -> qkv Linear ("<prefix>.qkv", D -> 3D) -> causal multi-head attention
// (kernels/cpu/attention.hpp) -> output projection Linear ("<prefix>.proj", D -> D).
//
// Stash layout: tensors {qkv, probs [B, H, T, T]}, children {qkv linear, proj linear}. backward_input
// releases qkv and probs (only the input gradient needs them); the children keep what their weight
// gradients need. The attention-probability gradient is scratch (kWorkspace), freed on return.
#pragma once

#include <memory>
#include <string>

#include "layers/layer.hpp"
#include "layers/linear.hpp"
#include "layers/param_init.hpp"

namespace cleave::layers {

class CausalSelfAttention final : public Layer {
 public:
  // `init` for qkv; `proj_init` for the output projection (GPT-2 scales its std by 1/sqrt(2·n_layers)).
  CausalSelfAttention(std::string prefix, std::int64_t d_model, std::int64_t n_heads, const ParamInit& init,
                      const ParamInit& proj_init);

  std::string_view kind() const override { return "causal_self_attention"; }
  Tensor forward(const Tensor& x, Stash& stash, Context& ctx) override;
  Tensor backward_input(const Tensor& dy, Stash& stash, Context& ctx) override;
  void backward_weight(Stash& stash, Context& ctx) override;
  std::vector<std::shared_ptr<Param>> params() const override;

 private:
  std::string prefix_;
  std::int64_t d_model_, n_heads_;
  Linear qkv_;
  Linear proj_;
};

}  // namespace cleave::layers
