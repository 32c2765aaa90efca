// TransformerBlock (GPT-2, pre-LN): x1 = x + attn(ln1(x)); y = x1 + mlp(ln2(x1)).
// Parameters: "<prefix>.ln1.*", "<prefix>.attn.qkv.*", "<prefix>.attn.proj.*", "<prefix>.ln2.*",
// "<prefix>.mlp.fc.*", "<prefix>.mlp.proj.*". Residual output projections (attn.proj, mlp.proj) start with
// std init.std / sqrt(2 · n_layers), everything else per `init`.
//
// Stash layout: children {ln1, attn, ln2, mlp}; no tensors of its own (the residual sums are written in
// place into the branch outputs, which nothing stashes). What stays alive per sample is documented in
// partition/cost_model.hpp and checked by the layer tests.
#pragma once

#include <memory>
#include <string>

#include "layers/attention.hpp"
#include "layers/layer.hpp"
#include "layers/layernorm.hpp"
#include "layers/mlp.hpp"
#include "layers/param_init.hpp"

namespace cleave::layers {

class TransformerBlock final : public Layer {
 public:
  TransformerBlock(std::string prefix, std::int64_t d_model, std::int64_t n_heads, std::int64_t d_ff,
                   std::int64_t n_layers, const ParamInit& init);

  std::string_view kind() const override { return "transformer_block"; }
  Tensor forward(const Tensor& x, Stash& stash, Context& ctx) override;
  Tensor backward_input(const Tensor& dy, Stash& stash, Context& ctx) override;
  void backward_weight(Stash& stash, Context& ctx) override;
  std::vector<std::shared_ptr<Param>> params() const override;

 private:
  std::string prefix_;
  LayerNorm ln1_;
  CausalSelfAttention attn_;
  LayerNorm ln2_;
  Mlp mlp_;
};

}  // namespace cleave::layers
