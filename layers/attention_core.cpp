// The attention core over the op seam in every context-parallel mode (see attention_core.hpp).
#include "layers/attention_core.hpp"

#include <string>

#include "engine/core/error.hpp"
#include "kernels/ops/ops.hpp"
#include "layers/context_parallel/ring_attention.hpp"
#include "layers/context_parallel/ulysses.hpp"
#include "layers/layer_util.hpp"

namespace cleave::layers {
namespace {

bool all_to_all(const Context& ctx) { return ctx.cp.active() && ctx.cp.exchange == CpExchange::kAllToAll; }
bool ring(const Context& ctx) { return ctx.cp.active() && ctx.cp.exchange == CpExchange::kRing; }

// The op's parameters for a core of h query and hkv key/value heads (grouped-query attention when hkv < h):
// causal over the whole sequence the core sees (positions from 0), with Mistral's sliding window (`window` keys,
// 0: none).
ops::AttentionParams core_params(std::int64_t h, std::int64_t hkv, std::int64_t window) {
  ops::AttentionParams params;
  params.q_heads = h;
  params.kv_heads = hkv;
  params.window = window;
  return params;
}

// out and lse of `core_qkv` ([B, T, (H + 2·Hkv)·hd]): memory-efficient attention, nothing of size T x T kept.
void full_forward(const Context& ctx, const Tensor& core_qkv, std::int64_t h, std::int64_t hkv, std::int64_t hd,
                  std::int64_t window, Tensor& out, Tensor& lse) {
  const std::int64_t b = core_qkv.dim(0), t = core_qkv.dim(1);
  out = new_activation(ctx, Shape{b, t, h * hd});
  lse = new_activation(ctx, Shape{b, h, t}, DType::kF32);
  ops::attention_forward_packed(ctx, core_qkv, out, lse, core_params(h, hkv, window));
}

}  // namespace

Tensor token_run(const Tensor& x, std::int64_t b, std::int64_t begin, std::int64_t length) {
  const std::int64_t t = x.dim(1), c = x.numel() / (x.dim(0) * t);
  return x.slice(b, b + 1).view(Shape{t, c}).slice(begin, begin + length).view(Shape{1, length, c});
}

Tensor attention_core_forward(Context& ctx, const Tensor& qkv, std::int64_t heads, std::int64_t kv_heads,
                              std::int64_t hd, std::int64_t window, bool recompute, Stash& stash,
                              const std::string& who) {
  CLEAVE_ASSERT(kv_heads > 0 && heads % kv_heads == 0 && qkv.dim(2) == (heads + 2 * kv_heads) * hd,
                "{}: qkv {} is not {} query and {} key/value heads of {}", who, qkv.shape().str(), heads, kv_heads, hd);
  if (ring(ctx)) return ring_attention_forward(ctx, qkv, {heads, kv_heads, hd, window}, recompute, stash, who);
  const bool a2a = all_to_all(ctx);
  const Tensor core_qkv = a2a ? seq_to_heads(ctx, qkv, {heads, kv_heads, kv_heads}, hd) : qkv;
  const std::int64_t h = a2a ? heads / ctx.cp.size : heads;
  const std::int64_t hkv = a2a ? kv_heads / ctx.cp.size : kv_heads;
  Tensor out, lse;
  full_forward(ctx, core_qkv, h, hkv, hd, window, out, lse);
  // Without all_to_all, out is also the output projection's stashed input (one storage); selective
  // recomputation drops only the statistics.
  if (recompute) stash.tensors = {core_qkv, out};
  else stash.tensors = {core_qkv, out, lse};
  return a2a ? heads_to_seq(ctx, out, {heads}, hd) : out;
}

Tensor attention_core_backward(Context& ctx, const std::function<Tensor()>& dout_of, std::int64_t heads,
                               std::int64_t kv_heads, std::int64_t hd, std::int64_t window, bool recompute,
                               Stash& stash, const std::string& who,
                               const std::function<Tensor(const Tensor&)>& then) {
  if (ring(ctx)) {
    const Tensor dqkv =
        ring_attention_backward(ctx, dout_of(), {heads, kv_heads, hd, window}, recompute, stash, who);
    return then ? then(dqkv) : dqkv;
  }
  const bool a2a = all_to_all(ctx);
  const std::int64_t h = a2a ? heads / ctx.cp.size : heads;
  const std::int64_t hkv = a2a ? kv_heads / ctx.cp.size : kv_heads;
  const Tensor core_qkv = stash_at(stash, 0, who);
  const Tensor out = stash_at(stash, 1, who);
  Tensor lse;
  if (recompute) {
    Tensor scratch_out;  // freed here: only the rebuilt statistics (bit-identical: the same op, same input) stay
    full_forward(ctx, core_qkv, h, hkv, hd, window, scratch_out, lse);
  } else {
    lse = stash_at(stash, 2, who);
  }
  const Tensor dout = dout_of();
  const Tensor core_dout = a2a ? seq_to_heads(ctx, dout, {heads}, hd) : dout;
  Tensor dqkv = new_activation(ctx, core_qkv.shape());
  ops::attention_backward_packed(ctx, core_qkv, out, lse, core_dout, dqkv, core_params(h, hkv, window));
  stash.tensors.clear();
  const Tensor local = a2a ? heads_to_seq(ctx, dqkv, {heads, kv_heads, kv_heads}, hd) : dqkv;
  return then ? then(local) : local;  // core_qkv, out and lse held until `then` returns
}

std::pair<std::int64_t, std::int64_t> attention_core_tokens(const Context& ctx, const Stash& stash, bool recompute,
                                                            const std::string& who) {
  const Tensor& first = stash_at(stash, 0, who);
  if (ring(ctx) && !recompute) return {first.dim(0), 2 * first.dim(1)};  // chunk-major copies of two chunks
  if (all_to_all(ctx)) return {first.dim(0), first.dim(1) / ctx.cp.size};  // the exchanged whole sequence
  return {first.dim(0), first.dim(1)};
}

}  // namespace cleave::layers
