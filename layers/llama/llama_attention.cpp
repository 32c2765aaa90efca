// Llama attention: separate q/k/v projections, rope + packing of the Hkv key/value heads as they are (grouped-query
// attention in the op, nothing repeated), the seam's attention core, o.
#include "layers/llama/llama_attention.hpp"

#include <array>

#include "kernels/ops/ops.hpp"
#include "layers/attention_core.hpp"
#include "layers/layer_util.hpp"

namespace cleave::layers {

LlamaAttention::LlamaAttention(std::string prefix, const LlamaHeads& heads, LayerPtr q, LayerPtr k, LayerPtr v,
                               LayerPtr o, bool tensor_parallel, QkNorms qk_norms)
    : prefix_(std::move(prefix)),
      heads_(heads),
      tensor_parallel_(tensor_parallel),
      q_(std::move(q)),
      k_(std::move(k)),
      v_(std::move(v)),
      o_(std::move(o)),
      norms_(std::move(qk_norms)) {
  CLEAVE_ASSERT(q_ && k_ && v_ && o_, "{}: needs q, k, v and o parts", who());
  CLEAVE_ASSERT((norms_.q == nullptr) == (norms_.k == nullptr), "{}: q and k norms come together", who());
  CLEAVE_ASSERT(heads.n_heads > 0 && heads.d_model % heads.n_heads == 0 && head_dim() % 2 == 0 &&
                    heads.local_heads > 0 && heads.local_kv_heads > 0 &&
                    heads.local_heads % heads.local_kv_heads == 0 &&
                    heads.local_heads * heads.n_kv_heads == heads.local_kv_heads * heads.n_heads,
                "{}: bad heads: d_model {}, {} query / {} kv heads, {} / {} local", who(), heads.d_model,
                heads.n_heads, heads.n_kv_heads, heads.local_heads, heads.local_kv_heads);
}

ops::RopeParams LlamaAttention::rope_params() const {
  ops::RopeParams rope;
  rope.q_heads = heads_.local_heads;
  rope.kv_heads = heads_.local_kv_heads;
  rope.theta = heads_.rope_theta;
  rope.repeat_kv_heads = false;  // the attention op takes Hq != Hkv: K/V stay Hkv-sized
  return rope;
}

std::string LlamaAttention::make_who() const {
  return (tensor_parallel_ ? "parallel llama attention " : "llama attention ") + prefix_;
}

namespace {

// Runs `apply(rope, view)` over the rank's tokens: once, from the first position, without context parallelism;
// else once per run of consecutive global positions (Context::cp; two runs per sample under ring), where view(x)
// is x narrowed to that sample's run. `b` samples of `t` local tokens.
template <typename Apply>
void over_position_runs(const Context& ctx, std::int64_t b, std::int64_t t, ops::RopeParams rope, Apply apply) {
  const CpSegments runs = ctx.cp.segments(t);
  if (runs.size() == 1) {
    rope.position_offset = runs[0].global_begin;
    apply(rope, [](const Tensor& x) { return x; });
    return;
  }
  for (std::int64_t s = 0; s < b; ++s) {
    for (const CpSegment& run : runs) {
      rope.position_offset = run.global_begin;
      apply(rope, [&](const Tensor& x) { return token_run(x, s, run.local_begin, run.length); });
    }
  }
}

// rope + packing over the rank's tokens, at their global positions.
void rope_pack_runs(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qkv,
                    ops::RopeParams rope) {
  over_position_runs(ctx, q.dim(0), q.dim(1), rope, [&](const ops::RopeParams& at, const auto& view) {
    ops::rope_pack_qkv(ctx, view(q), view(k), view(v), view(qkv), at);
  });
}

void rope_unpack_runs(const Context& ctx, const Tensor& dqkv, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                      ops::RopeParams rope) {
  over_position_runs(ctx, dq.dim(0), dq.dim(1), rope, [&](const ops::RopeParams& at, const auto& view) {
    ops::rope_pack_qkv_backward(ctx, view(dqkv), view(dq), view(dk), view(dv), at);
  });
}

}  // namespace

namespace {
std::array<Stash*, 3> qkv_stashes(Stash& stash) {
  return {&stash.children[0], &stash.children[1], &stash.children[2]};
}
}  // namespace

Tensor LlamaAttention::forward(const Tensor& x, Stash& stash, Context& ctx) {
  check_input(ctx, x, DType::kF32, heads_.d_model, 3, who());
  CLEAVE_CHECK(x.rank() == 3, "{}: expected [batch, seq, {}], got {}", who(), heads_.d_model, x.shape().str());
  stash.reset(norms_.q ? 6 : 4);
  std::array<Tensor, 3> projected;
  qkv_.forward(x, qkv_stashes(stash), projected, ctx);
  if (norms_.q) {
    projected[0] = norms_.q->forward(projected[0], stash.children[4], ctx);
    projected[1] = norms_.k->forward(projected[1], stash.children[5], ctx);
  }
  const Tensor &q = projected[0], &k = projected[1], &v = projected[2];
  // Under sequence parallelism x is this rank's sequence shard and q, k, v (column-parallel) cover the
  // gathered sequence of this cp rank: T and the rope positions come from them (and Context::cp), not from x.
  const std::int64_t b = q.dim(0), t = q.dim(1), hd = head_dim(), lq = heads_.local_heads;
  const std::int64_t lkv = heads_.local_kv_heads;
  // Grouped-query packing: the Lkv key/value heads once (the op reads kv head h / (L / Lkv) for query head h).
  Tensor qkv = new_activation(ctx, Shape{b, t, (lq + 2 * lkv) * hd});
  rope_pack_runs(ctx, q, k, v, qkv, rope_params());
  const Tensor out = attention_core_forward(ctx, qkv, lq, lkv, hd, heads_.window, recompute_scores_, stash, who());
  return o_->forward(out, stash.children[3], ctx);
}

Tensor LlamaAttention::backward_input(const Tensor& dy, Stash& stash, Context& ctx) {
  const std::int64_t hd = head_dim(), lq = heads_.local_heads, lkv = heads_.local_kv_heads;
  const auto [b, t] = attention_core_tokens(ctx, stash, recompute_scores_, who());
  Tensor dq = new_activation(ctx, Shape{b, t, lq * hd});
  Tensor dk = new_activation(ctx, Shape{b, t, lkv * hd});
  Tensor dv = new_activation(ctx, Shape{b, t, lkv * hd});
  {  // the core's tensors and their gradients are released before the projections' backward
    // The callback captures one reference, so its std::function holds it in place (no allocation per call).
    struct Call {
      const LlamaAttention& self;
      const Tensor& dy;
      Stash& stash;
      Context& ctx;
    } call{*this, dy, stash, ctx};
    const Tensor dqkv = attention_core_backward(
        ctx, [&call] { return call.self.o_->backward_input(call.dy, call.stash.children[3], call.ctx); }, lq, lkv,
        hd, heads_.window, recompute_scores_, stash, who());
    rope_unpack_runs(ctx, dqkv, dq, dk, dv, rope_params());
  }
  if (norms_.q) {
    dq = norms_.q->backward_input(dq, stash.children[4], ctx);
    dk = norms_.k->backward_input(dk, stash.children[5], ctx);
  }
  const std::array<Tensor, 3> dys{dq, dk, dv};
  return qkv_.backward_input(dys, qkv_stashes(stash), ctx);
}

void LlamaAttention::backward_weight(Stash& stash, Context& ctx) {
  CLEAVE_ASSERT(stash.children.size() == (norms_.q ? 6u : 4u), "{}: backward_weight without forward", who());
  qkv_.backward_weight(qkv_stashes(stash), ctx);
  o_->backward_weight(stash.children[3], ctx);
  if (norms_.q) {
    norms_.q->backward_weight(stash.children[4], ctx);
    norms_.k->backward_weight(stash.children[5], ctx);
  }
  stash.clear();
}

std::vector<std::shared_ptr<Param>> LlamaAttention::params() const {
  std::vector<std::shared_ptr<Param>> out;
  for (const Layer* part : {q_.get(), k_.get(), v_.get(), o_.get(), norms_.q.get(), norms_.k.get()}) {
    if (part == nullptr) continue;
    for (auto& p : part->params()) out.push_back(p);
  }
  return out;
}

}  // namespace cleave::layers
