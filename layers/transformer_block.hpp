// TransformerBlock (pre-norm): x1 = x + attn(ln1(x)); y = x1 + mlp(ln2(x1)). The GPT-2 block (LayerNorms,
// CausalSelfAttention, GELU Mlp) and, built from other parts by make_llama_block (layers/llama/llama_block.hpp),
// the Llama block (RMSNorms, LlamaAttention, SwigluMlp): the residual wiring is the same, only the parts differ.
// Parameters: "<prefix>.ln1.*", "<prefix>.attn.qkv.*", "<prefix>.attn.proj.*", "<prefix>.ln2.*",
// "<prefix>.mlp.fc.*", "<prefix>.mlp.proj.*". Residual output projections (attn.proj, mlp.proj) start with
// std init.std / sqrt(2 · n_layers) (residual_proj_init), everything else per `init`.
//
// One implementation serves every layout: the four parts each map [B, T, D] to [B, T, D]. The first
// constructor builds the one-rank parts (LayerNorms, CausalSelfAttention, Mlp);
// make_parallel_transformer_block (layers/parallel/parallel_transformer_block.hpp) passes this tp rank's
// head-parallel attention and column/row-parallel MLP around replicated LayerNorms.
//
// The first residual add and ln2 run as one op where ln2 is a ResidualNorm (RmsNorm: the Llama and MoE blocks;
// layers/residual_norm.hpp), with the unfused pair's bits and stash; LayerNorm keeps the pair.
//
// Stash layout: children {ln1, attn, ln2, mlp}; no tensors of its own (the residual sums are written in
// place into the branch outputs, which nothing stashes). What stays alive per sample is documented in
// partition/cost_model.hpp and checked by the layer tests.
#pragma once

#include <memory>
#include <string>

#include "layers/layer.hpp"
#include "layers/param_init.hpp"

namespace cleave::layers {

class ResidualNorm;

class TransformerBlock final : public Layer {
 public:
  // One rank.
  TransformerBlock(std::string prefix, std::int64_t d_model, std::int64_t n_heads, std::int64_t d_ff,
                   std::int64_t n_layers, const ParamInit& init);
  // From parts. `tensor_parallel` and `family` only name the layer: kind "[parallel_]transformer_block" or
  // "[parallel_]llama_block", messages "[parallel ]transformer block <prefix>" / "[parallel ]llama block <prefix>".
  enum class Family { kGpt, kLlama };
  TransformerBlock(std::string prefix, LayerPtr ln1, LayerPtr attn, LayerPtr ln2, LayerPtr mlp, bool tensor_parallel,
                   Family family = Family::kGpt);

  std::string_view kind() const override;
  Tensor forward(const Tensor& x, Stash& stash, Context& ctx) override;
  Tensor backward_input(const Tensor& dy, Stash& stash, Context& ctx) override;
  void backward_weight(Stash& stash, Context& ctx) override;
  std::vector<std::shared_ptr<Param>> params() const override;

  // Selective recomputation: the attention part (a RecomputableScores, layers/attention.hpp) keeps no
  // softmax statistics (rebuilt in backward).
  void set_selective_recompute(bool on);

 private:
  const std::string& who() const { return who_; }
  std::string make_who() const;

  std::string prefix_;
  bool tensor_parallel_ = false;
  Family family_ = Family::kGpt;
  LayerPtr ln1_;
  LayerPtr attn_;
  LayerPtr ln2_;
  LayerPtr mlp_;
  ResidualNorm* ln2_residual_ = nullptr;  // ln2_ when it takes the residual add with it (RmsNorm), else null
  std::string who_ = make_who();  // last: built once from the members above, so no call builds a string
};

// `init` with std init.std / sqrt(2 · n_layers), for the residual output projections. Throws Error unless
// n_layers > 0.
ParamInit residual_proj_init(const ParamInit& init, std::int64_t n_layers);

}  // namespace cleave::layers
