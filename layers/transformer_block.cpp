// Pre-LN transformer block: the residual stream around ln1, attn, ln2, mlp.
#include "layers/transformer_block.hpp"

#include <cmath>

#include "kernels/ops/ops.hpp"
#include "layers/attention.hpp"
#include "layers/layer_util.hpp"
#include "layers/layernorm.hpp"
#include "layers/mlp.hpp"
#include "layers/residual_norm.hpp"

namespace cleave::layers {

ParamInit residual_proj_init(const ParamInit& init, std::int64_t n_layers) {
  CLEAVE_CHECK(n_layers > 0, "transformer block: n_layers must be > 0, got {}", n_layers);
  return init.with_std(init.std / std::sqrt(2.0f * static_cast<float>(n_layers)));
}

TransformerBlock::TransformerBlock(std::string prefix, std::int64_t d_model, std::int64_t n_heads,
                                   std::int64_t d_ff, std::int64_t n_layers, const ParamInit& init)
    : prefix_(std::move(prefix)),
      ln1_(std::make_unique<LayerNorm>(prefix_ + ".ln1", d_model, init)),
      attn_(std::make_unique<CausalSelfAttention>(prefix_ + ".attn", d_model, n_heads, init,
                                                  residual_proj_init(init, n_layers))),
      ln2_(std::make_unique<LayerNorm>(prefix_ + ".ln2", d_model, init)),
      mlp_(std::make_unique<Mlp>(prefix_ + ".mlp", d_model, d_ff, init, residual_proj_init(init, n_layers))) {}

TransformerBlock::TransformerBlock(std::string prefix, LayerPtr ln1, LayerPtr attn, LayerPtr ln2, LayerPtr mlp,
                                   bool tensor_parallel, Family family)
    : prefix_(std::move(prefix)),
      tensor_parallel_(tensor_parallel),
      family_(family),
      ln1_(std::move(ln1)),
      attn_(std::move(attn)),
      ln2_(std::move(ln2)),
      mlp_(std::move(mlp)) {
  CLEAVE_ASSERT(ln1_ && attn_ && ln2_ && mlp_, "{}: needs ln1, attn, ln2 and mlp parts", who());
  ln2_residual_ = dynamic_cast<ResidualNorm*>(ln2_.get());
}

std::string_view TransformerBlock::kind() const {
  if (family_ == Family::kLlama) return tensor_parallel_ ? "parallel_llama_block" : "llama_block";
  return tensor_parallel_ ? "parallel_transformer_block" : "transformer_block";
}

std::string TransformerBlock::make_who() const {
  const char* name = family_ == Family::kLlama ? "llama block " : "transformer block ";
  return (tensor_parallel_ ? std::string("parallel ") : std::string()) + name + prefix_;
}

Tensor TransformerBlock::forward(const Tensor& x, Stash& stash, Context& ctx) {
  stash.reset(4);
  Tensor a = ln1_->forward(x, stash.children[0], ctx);
  Tensor x1 = attn_->forward(a, stash.children[1], ctx);
  Tensor m;  // x1 = x + attn(ln1(x)); m = ln2(x1): one pass where ln2 can take the add (residual_norm.hpp)
  if (ln2_residual_ != nullptr) {
    m = ln2_residual_->forward_residual(x1, x, stash.children[2], ctx);
  } else {
    ops::add_inplace(ctx, x1, x);
    m = ln2_->forward(x1, stash.children[2], ctx);
  }
  Tensor y = mlp_->forward(m, stash.children[3], ctx);
  ops::add_inplace(ctx, y, x1);  // y = x1 + mlp(ln2(x1))
  return y;
}

Tensor TransformerBlock::backward_input(const Tensor& dy, Stash& stash, Context& ctx) {
  CLEAVE_ASSERT(stash.children.size() == 4, "{}: backward_input without forward", who());
  // dy is kept by the mlp's output projection (mlp.proj / mlp.down) for its weight gradient and belongs to the
  // caller: never written here.
  Tensor dm = mlp_->backward_input(dy, stash.children[3], ctx);
  Tensor dx1;  // ln2's input gradient plus the residual path's dy
  if (ln2_residual_ != nullptr) {
    dx1 = ln2_residual_->backward_input_residual(dm, dy, stash.children[2], ctx);
  } else {
    dx1 = ln2_->backward_input(dm, stash.children[2], ctx);
    ops::add_inplace(ctx, dx1, dy);
  }
  Tensor da = attn_->backward_input(dx1, stash.children[1], ctx);
  Tensor dx = ln1_->backward_input(da, stash.children[0], ctx);
  ops::add_inplace(ctx, dx, dx1);
  return dx;
}

void TransformerBlock::backward_weight(Stash& stash, Context& ctx) {
  CLEAVE_ASSERT(stash.children.size() == 4, "{}: backward_weight without forward", who());
  ln1_->backward_weight(stash.children[0], ctx);
  attn_->backward_weight(stash.children[1], ctx);
  ln2_->backward_weight(stash.children[2], ctx);
  mlp_->backward_weight(stash.children[3], ctx);
  stash.clear();
}

void TransformerBlock::set_selective_recompute(bool on) {
  auto* attention = dynamic_cast<RecomputableScores*>(attn_.get());
  CLEAVE_CHECK(attention != nullptr, "{}: selective recomputation needs an attention part that can recompute its "
               "scores", who());
  attention->set_recompute_scores(on);
}

std::vector<std::shared_ptr<Param>> TransformerBlock::params() const {
  std::vector<std::shared_ptr<Param>> out;
  for (const Layer* layer : {ln1_.get(), attn_.get(), ln2_.get(), mlp_.get()}) {
    for (auto& p : layer->params()) out.push_back(p);
  }
  return out;
}

}  // namespace cleave::layers
