// Llama attention: separate q/k/v projections, rope + grouped-query packing, the seam's attention core, o.
#include "layers/llama/llama_attention.hpp"

#include "kernels/ops/ops.hpp"
#include "layers/layer_util.hpp"

namespace cleave::layers {

LlamaAttention::LlamaAttention(std::string prefix, const LlamaHeads& heads, LayerPtr q, LayerPtr k, LayerPtr v,
                               LayerPtr o, bool tensor_parallel)
    : prefix_(std::move(prefix)),
      heads_(heads),
      tensor_parallel_(tensor_parallel),
      q_(std::move(q)),
      k_(std::move(k)),
      v_(std::move(v)),
      o_(std::move(o)) {
  CLEAVE_ASSERT(q_ && k_ && v_ && o_, "{}: needs q, k, v and o parts", who());
  CLEAVE_ASSERT(heads.n_heads > 0 && heads.d_model % heads.n_heads == 0 && head_dim() % 2 == 0 &&
                    heads.local_heads > 0 && heads.local_kv_heads > 0 &&
                    heads.local_heads % heads.local_kv_heads == 0 &&
                    heads.local_heads * heads.n_kv_heads == heads.local_kv_heads * heads.n_heads,
                "{}: bad heads: d_model {}, {} query / {} kv heads, {} / {} local", who(), heads.d_model,
                heads.n_heads, heads.n_kv_heads, heads.local_heads, heads.local_kv_heads);
}

std::string LlamaAttention::who() const {
  return (tensor_parallel_ ? "parallel llama attention " : "llama attention ") + prefix_;
}

// rope_pack_qkv repeats each key/value head for its query heads, so the core sees Lq heads of each.
ops::AttentionParams LlamaAttention::core_params() const {
  ops::AttentionParams params;
  params.q_heads = heads_.local_heads;
  params.kv_heads = heads_.local_heads;
  params.window = heads_.window;  // Mistral's sliding window (0: none); positions are 0..T-1 within the sample
  return params;
}

Tensor LlamaAttention::forward(const Tensor& x, Stash& stash, Context& ctx) {
  check_input(ctx, x, DType::kF32, heads_.d_model, 3, who());
  CLEAVE_CHECK(x.rank() == 3, "{}: expected [batch, seq, {}], got {}", who(), heads_.d_model, x.shape().str());
  stash.clear();
  stash.children.resize(4);
  const std::vector<Tensor> projected =
      qkv_.forward(x, {&stash.children[0], &stash.children[1], &stash.children[2]}, ctx);
  const Tensor &q = projected[0], &k = projected[1], &v = projected[2];
  // Under sequence parallelism x is this rank's sequence shard and q, k, v (column-parallel) cover the
  // gathered full sequence: T and the rope positions 0..T-1 come from them, not from x.
  const std::int64_t b = q.dim(0), t = q.dim(1), hd = head_dim(), lq = heads_.local_heads;
  Tensor qkv = new_activation(ctx, Shape{b, t, 3 * lq * hd});
  ops::rope_pack_qkv(ctx, q, k, v, qkv, {lq, heads_.local_kv_heads, heads_.rope_theta, 0});
  Tensor out = new_activation(ctx, Shape{b, t, lq * hd});
  Tensor lse = new_activation(ctx, Shape{b, lq, t}, DType::kF32);
  ops::attention_forward_packed(ctx, qkv, out, lse, core_params());
  // out is also o's stashed input (one storage); selective recomputation drops only the statistics.
  if (recompute_scores_) stash.tensors = {qkv, out};
  else stash.tensors = {qkv, out, lse};
  return o_->forward(out, stash.children[3], ctx);
}

Tensor LlamaAttention::backward_input(const Tensor& dy, Stash& stash, Context& ctx) {
  const std::int64_t b = stash_at(stash, 0, who()).dim(0), t = stash_at(stash, 0, who()).dim(1), hd = head_dim(),
                     lq = heads_.local_heads, lkv = heads_.local_kv_heads;
  Tensor dq = new_activation(ctx, Shape{b, t, lq * hd});
  Tensor dk = new_activation(ctx, Shape{b, t, lkv * hd});
  Tensor dv = new_activation(ctx, Shape{b, t, lkv * hd});
  {  // qkv, the statistics and their gradients are released before the projections' backward
    const Tensor qkv = stash_at(stash, 0, who());
    const Tensor out = stash_at(stash, 1, who());
    Tensor lse;
    if (recompute_scores_) {
      lse = new_activation(ctx, Shape{b, lq, t}, DType::kF32);
      const Tensor scratch_out = new_activation(ctx, Shape{b, t, lq * hd});
      ops::attention_forward_packed(ctx, qkv, scratch_out, lse, core_params());
    } else {
      lse = stash_at(stash, 2, who());
    }
    const Tensor dout = o_->backward_input(dy, stash.children[3], ctx);
    const Tensor dqkv = new_activation(ctx, qkv.shape());
    ops::attention_backward_packed(ctx, qkv, out, lse, dout, dqkv, core_params());
    stash.tensors.clear();
    ops::rope_pack_qkv_backward(ctx, dqkv, dq, dk, dv, {lq, lkv, heads_.rope_theta, 0});
  }
  return qkv_.backward_input({dq, dk, dv}, {&stash.children[0], &stash.children[1], &stash.children[2]}, ctx);
}

void LlamaAttention::backward_weight(Stash& stash, Context& ctx) {
  CLEAVE_ASSERT(stash.children.size() == 4, "{}: backward_weight without forward", who());
  qkv_.backward_weight({&stash.children[0], &stash.children[1], &stash.children[2]}, ctx);
  o_->backward_weight(stash.children[3], ctx);
  stash.clear();
}

std::vector<std::shared_ptr<Param>> LlamaAttention::params() const {
  std::vector<std::shared_ptr<Param>> out;
  for (const Layer* part : {q_.get(), k_.get(), v_.get(), o_.get()}) {
    for (auto& p : part->params()) out.push_back(p);
  }
  return out;
}

}  // namespace cleave::layers
