// Causal self-attention layer: qkv projection, the attention op of the seam, output projection.
#include "layers/attention.hpp"

#include "kernels/ops/ops.hpp"
#include "layers/layer_util.hpp"
#include "layers/linear.hpp"

namespace cleave::layers {

void check_attention_heads(const std::string& prefix, std::int64_t d_model, std::int64_t n_heads) {
  CLEAVE_CHECK(n_heads > 0 && d_model % n_heads == 0,
               "attention {}: d_model ({}) must be divisible by n_heads ({})", prefix, d_model, n_heads);
}

CausalSelfAttention::CausalSelfAttention(std::string prefix, std::int64_t d_model, std::int64_t n_heads,
                                         const ParamInit& init, const ParamInit& proj_init)
    : prefix_(std::move(prefix)), d_model_(d_model), n_heads_(n_heads), local_heads_(n_heads) {
  check_attention_heads(prefix_, d_model, n_heads);  // before the projections allocate anything
  qkv_ = std::make_unique<Linear>(prefix_ + ".qkv", d_model, 3 * d_model, true, init);
  proj_ = std::make_unique<Linear>(prefix_ + ".proj", d_model, d_model, true, proj_init);
}

CausalSelfAttention::CausalSelfAttention(std::string prefix, std::int64_t d_model, std::int64_t n_heads,
                                         std::int64_t local_heads, LayerPtr qkv, LayerPtr proj, bool tensor_parallel)
    : prefix_(std::move(prefix)),
      d_model_(d_model),
      n_heads_(n_heads),
      local_heads_(local_heads),
      tensor_parallel_(tensor_parallel),
      qkv_(std::move(qkv)),
      proj_(std::move(proj)) {
  check_attention_heads(prefix_, d_model, n_heads);
  CLEAVE_ASSERT(local_heads > 0 && n_heads % local_heads == 0 && qkv_ && proj_,
                "{}: needs qkv and proj parts and a whole share of the {} heads, got {} local heads", who(), n_heads,
                local_heads);
}

std::string CausalSelfAttention::who() const {
  return (tensor_parallel_ ? "parallel attention " : "attention ") + prefix_;
}

ops::AttentionParams CausalSelfAttention::core_params() const {
  ops::AttentionParams params;
  params.q_heads = local_heads_;
  params.kv_heads = local_heads_;
  return params;
}

Tensor CausalSelfAttention::forward(const Tensor& x, Stash& stash, Context& ctx) {
  const std::string who = this->who();
  check_input(ctx, x, DType::kF32, d_model_, 3, who);
  CLEAVE_CHECK(x.rank() == 3, "{}: expected [batch, seq, {}], got {}", who, d_model_, x.shape().str());
  stash.clear();
  stash.children.resize(2);
  Tensor qkv = qkv_->forward(x, stash.children[0], ctx);
  // The sequence from qkv, not x: under sequence parallelism x is this tp rank's shard of the tokens and the
  // column-parallel qkv part returns every token (layers/parallel/column_parallel_linear.hpp).
  const std::int64_t b = qkv.dim(0), t = qkv.dim(1), hd = d_model_ / n_heads_;
  Tensor out = new_activation(ctx, Shape{b, t, local_heads_ * hd});
  Tensor lse = new_activation(ctx, Shape{b, local_heads_, t}, DType::kF32);
  ops::attention_forward_packed(ctx, qkv, out, lse, core_params());
  // out is also proj's stashed input (one storage); selective recomputation drops only the statistics.
  if (recompute_scores_) stash.tensors = {qkv, out};
  else stash.tensors = {qkv, out, lse};
  return proj_->forward(out, stash.children[1], ctx);
}

Tensor CausalSelfAttention::backward_input(const Tensor& dy, Stash& stash, Context& ctx) {
  const std::string who = this->who();
  const Tensor qkv = stash_at(stash, 0, who);
  const Tensor out = stash_at(stash, 1, who);
  Tensor lse;
  if (recompute_scores_) {
    lse = new_activation(ctx, Shape{qkv.dim(0), local_heads_, qkv.dim(1)}, DType::kF32);
    const Tensor scratch_out = new_activation(ctx, out.shape());
    ops::attention_forward_packed(ctx, qkv, scratch_out, lse, core_params());
  } else {
    lse = stash_at(stash, 2, who);
  }
  Tensor dout = proj_->backward_input(dy, stash.children[1], ctx);
  Tensor dqkv = new_activation(ctx, qkv.shape());
  ops::attention_backward_packed(ctx, qkv, out, lse, dout, dqkv, core_params());
  stash.tensors.clear();
  return qkv_->backward_input(dqkv, stash.children[0], ctx);
}

void CausalSelfAttention::backward_weight(Stash& stash, Context& ctx) {
  CLEAVE_ASSERT(stash.children.size() == 2, "{}: backward_weight without forward", who());
  qkv_->backward_weight(stash.children[0], ctx);
  proj_->backward_weight(stash.children[1], ctx);
  stash.clear();
}

std::vector<std::shared_ptr<Param>> CausalSelfAttention::params() const {
  auto out = qkv_->params();
  for (auto& p : proj_->params()) out.push_back(p);
  return out;
}

}  // namespace cleave::layers
