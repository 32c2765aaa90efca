// CausalSelfAttention: x [B, T, D] -> qkv projection -> causal multi-head attention over the heads this
// layer computes (ops::attention_forward, kernels/ops/ops.hpp) -> output projection -> y [B, T, D].
//
// One implementation serves every layout; only the two projections and the number of local heads differ:
//  - one rank: qkv Linear ("<prefix>.qkv", D -> 3D) and proj Linear ("<prefix>.proj", D -> D) over all H
//    heads (the first constructor builds them);
//  - tensor parallel (make_parallel_attention, layers/parallel/parallel_transformer_block.hpp):
//    ColumnParallelLinear qkv (q|k|v blocks split by heads), RowParallelLinear proj, H / tp local heads.
// With hd = D / H and L local heads, the qkv part maps [B, T, D] to [B, T, 3·L·hd] (q, k, v of the local
// heads) and the proj part maps [B, T, L·hd] to [B, T, D].
//
// The core is memory-efficient attention (ops::attention_forward_packed): no [T, T] probabilities are kept.
// Stash layout: tensors {qkv, out [B, T, L·hd], lse [B, L, T] f32} ({qkv, out} under selective recomputation,
// which rebuilds lse), children {qkv, proj}; out is proj's stashed input too (one storage). backward_input
// releases the tensors (only the input gradient needs them); the children keep what their weight gradients
// need.
#pragma once

#include <memory>
#include <string>

#include "kernels/ops/ops.hpp"
#include "layers/layer.hpp"
#include "layers/param_init.hpp"

namespace cleave::layers {

// An attention part that can drop its softmax statistics and rebuild them in backward (train.recompute
// "selective"): what a pre-norm block (TransformerBlock) switches, whichever attention it holds. With the
// memory-efficient core only the per-row log-sum-exp ([B, H, T] f32) is dropped; the O(T^2) probabilities this
// once saved no longer exist.
class RecomputableScores {
 public:
  virtual ~RecomputableScores() = default;
  virtual void set_recompute_scores(bool on) = 0;
};

class CausalSelfAttention final : public Layer, public RecomputableScores {
 public:
  // One rank. `init` for qkv; `proj_init` for the output projection (GPT-2 scales its std by 1/sqrt(2·n_layers)).
  CausalSelfAttention(std::string prefix, std::int64_t d_model, std::int64_t n_heads, const ParamInit& init,
                      const ParamInit& proj_init);
  // From parts computing `local_heads` of the n_heads heads (shapes above). `tensor_parallel` only names
  // the layer: kind "parallel_causal_self_attention", messages "parallel attention <prefix>".
  CausalSelfAttention(std::string prefix, std::int64_t d_model, std::int64_t n_heads, std::int64_t local_heads,
                      LayerPtr qkv, LayerPtr proj, bool tensor_parallel);

  std::string_view kind() const override {
    return tensor_parallel_ ? "parallel_causal_self_attention" : "causal_self_attention";
  }
  Tensor forward(const Tensor& x, Stash& stash, Context& ctx) override;
  Tensor backward_input(const Tensor& dy, Stash& stash, Context& ctx) override;
  void backward_weight(Stash& stash, Context& ctx) override;
  std::vector<std::shared_ptr<Param>> params() const override;

  // Selective recomputation (train.recompute "selective"): forward keeps {qkv, out}, and backward_input
  // reruns the attention core on the stashed qkv to rebuild lse (bit-identical: the same op on the same
  // input; its out goes to scratch) and frees it on return.
  void set_recompute_scores(bool on) override { recompute_scores_ = on; }

 private:
  const std::string& who() const { return who_; }
  std::string make_who() const;

  std::string prefix_;
  std::int64_t d_model_, n_heads_, local_heads_;
  bool tensor_parallel_ = false;
  bool recompute_scores_ = false;
  LayerPtr qkv_;
  LayerPtr proj_;
  std::string who_ = make_who();  // last: built once from the members above, so no call builds a string
};

// Throws Error unless n_heads > 0 divides d_model (the message names the layer `prefix`).
void check_attention_heads(const std::string& prefix, std::int64_t d_model, std::int64_t n_heads);

}  // namespace cleave::layers
