// Causal self-attention layer: qkv projection, the attention op of the seam, output projection.
#include "layers/attention.hpp"

#include "kernels/ops/ops.hpp"
#include "layers/attention_core.hpp"
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

std::string CausalSelfAttention::make_who() const {
  return (tensor_parallel_ ? "parallel attention " : "attention ") + prefix_;
}

Tensor CausalSelfAttention::forward(const Tensor& x, Stash& stash, Context& ctx) {
  const std::string& who = this->who();
  check_input(ctx, x, DType::kF32, d_model_, 3, who);
  CLEAVE_CHECK(x.rank() == 3, "{}: expected [batch, seq, {}], got {}", who, d_model_, x.shape().str());
  stash.reset(2);
  // The sequence from qkv, not x: under sequence parallelism x is this tp rank's shard of the tokens and the
  // column-parallel qkv part returns every token (layers/parallel/column_parallel_linear.hpp).
  const Tensor qkv = qkv_->forward(x, stash.children[0], ctx);
  const Tensor out = attention_core_forward(ctx, qkv, local_heads_, local_heads_, d_model_ / n_heads_, 0,
                                            recompute_scores_, stash, who);
  return proj_->forward(out, stash.children[1], ctx);
}

Tensor CausalSelfAttention::backward_input(const Tensor& dy, Stash& stash, Context& ctx) {
  // The callbacks capture one reference each, so their std::function holds them in place (no allocation per call).
  struct Call {
    const CausalSelfAttention& self;
    const Tensor& dy;
    Stash& stash;
    Context& ctx;
  } call{*this, dy, stash, ctx};
  return attention_core_backward(
      ctx, [&call] { return call.self.proj_->backward_input(call.dy, call.stash.children[1], call.ctx); },
      local_heads_, local_heads_, d_model_ / n_heads_, 0, recompute_scores_, stash, who(),
      [&call](const Tensor& dqkv) { return call.self.qkv_->backward_input(dqkv, call.stash.children[0], call.ctx); });
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
