// The CPU backend's attention slots (contracts in ops.hpp "Attention"; the packed and unpacked forms arrive as
// one AttentionProblem, ops_attention.cpp): the memory-efficient (flash) forward and backward of
// kernels/cpu/flash_attention and the log-sum-exp merge of two partial attentions (ring attention).
// Invariant: all-bf16 problems run the kernels' bf16 overloads (bf16 score products, within bf16 rounding of the f32
// kernel on the rounded inputs, flash_attention.hpp), or under ctx.attention_sums kReordered or kReorderedQuarters
// (verify's twin references) the f32 kernel on f32 views rounding P and dS as the bf16 kernel does, its key blocks
// halved or quartered (the same values, the sums in the f32 GEMM's order and merged over 2 or 4 times the blocks); any
// other mix the f32 kernel on f32 views; the kernels' workspace comes from ctx.allocator (kWorkspace) and is returned
// before the slot returns.
#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>

#include "kernels/cpu/blas_runtime.hpp"
#include "kernels/cpu/flash_attention.hpp"
#include "kernels/ops/attention_shape.hpp"
#include "kernels/ops/cpu/cpu_slots.hpp"
#include "kernels/ops/cpu_f32_view.hpp"

namespace cleave::ops::cpu_detail {

namespace {

// f32 views of an attention problem's operands: a tensor that several operands share (the packed qkv, dqkv) is
// widened once; pointers address each operand's head 0 column. The views live in fixed arrays (a problem has at most
// kMaxViews distinct inputs and outputs): making them allocates no heap memory beyond a widened copy's workspace.
class AttentionViews {
 public:
  const float* in(const Context& ctx, const AttentionOperand& op) {
    for (int i = 0; i < ins_; ++i) {
      if (in_keys_[i].raw_data() == op.t.raw_data()) return in_views_[i]->get() + op.col;
    }
    CLEAVE_ASSERT(ins_ < kMaxViews, "attention: more than {} distinct input tensors", kMaxViews);
    in_keys_[ins_] = op.t;
    in_views_[ins_].emplace(ctx, op.t);
    return in_views_[ins_++]->get() + op.col;
  }
  float* out(const Context& ctx, const AttentionOperand& op, bool read) {
    for (int i = 0; i < outs_; ++i) {
      if (out_keys_[i].raw_data() == op.t.raw_data()) return out_views_[i]->get() + op.col;
    }
    CLEAVE_ASSERT(outs_ < kMaxViews, "attention: more than {} distinct output tensors", kMaxViews);
    out_keys_[outs_] = op.t;
    out_views_[outs_].emplace(ctx, op.t, read);
    return out_views_[outs_++]->get() + op.col;
  }

 private:
  static constexpr int kMaxViews = 8;  // the backward reads q, k, v, out, dout, lse: six at most
  std::array<Tensor, kMaxViews> in_keys_, out_keys_;
  std::array<std::optional<F32In>, kMaxViews> in_views_;
  std::array<std::optional<F32Out>, kMaxViews> out_views_;  // written back (narrowed) when the views go
  int ins_ = 0, outs_ = 0;
};

// The CPU kernel's shape; bf16_roundings (ops.hpp) asks the f32 kernel for the bf16 kernel's P and dS roundings, and
// so does an all-bf16 problem sent to the f32 kernel by AttentionSums::kReordered or kReorderedQuarters (`reordered`:
// ctx's sums), whose key blocks are also a half or a quarter of the kernel's.
kc::FlashAttentionShape flash_shape(const AttentionProblem& p, bool reordered, AttentionSums sums) {
  kc::FlashAttentionShape s = flash_shape_of<kc::FlashAttentionShape>(p);
  s.round_probabilities = p.params.bf16_roundings || reordered;
  const std::int64_t parts = sums == AttentionSums::kReorderedQuarters ? 4 : 2;
  if (reordered) s.key_block = (std::min(kc::kFlashBlockK, std::max<std::int64_t>(s.kv_len, 1)) + parts - 1) / parts;
  return s;
}

Tensor flash_workspace(const Context& ctx, const kc::FlashAttentionShape& s, int threads, bool bf16) {
  const auto floats = static_cast<std::int64_t>(kc::flash_attention_workspace_floats(s, threads, bf16));
  return Tensor::empty(Shape{floats}, DType::kF32, MemoryCategory::kWorkspace, *ctx.allocator);
}

// An operand's head 0 column as bf16 bits.
const std::uint16_t* bf16_at(const AttentionOperand& op) { return cpu_detail::bf16_data(op.t) + op.col; }
std::uint16_t* bf16_out_at(const AttentionOperand& op) { return cpu_detail::bf16_data(op.t) + op.col; }

bool all_bf16_operands(std::initializer_list<const AttentionOperand*> ops) {
  for (const AttentionOperand* op : ops) {
    if (op->t.dtype() != DType::kBF16) return false;
  }
  return true;
}

// An all-bf16 problem the bf16 kernel runs: every one but under AttentionSums::kReordered (precision.hpp), which sends
// it to the f32 kernel on widened views with the bf16 kernel's roundings.
bool bf16_kernel(const Context& ctx, bool all_bf16) {
  return all_bf16 && ctx.attention_sums == AttentionSums::kKernel;
}

}  // namespace

// All-bf16 problems (the mixed-precision step) go to the kernels' bf16 overloads, which read bf16 blocks as they go
// (flash_attention.hpp), unless ctx.attention_sums says kReordered; other mixes widen whole tensors.
void attention_forward(const Context& ctx, const AttentionProblem& p) {
  const bool all_bf16 = all_bf16_operands({&p.q, &p.k, &p.v, &p.out});
  const kc::FlashAttentionShape s = flash_shape(p, all_bf16 && !bf16_kernel(ctx, all_bf16), ctx.attention_sums);
  const int threads = kc::kernel_threads();
  if (bf16_kernel(ctx, all_bf16)) {
    const Tensor ws = flash_workspace(ctx, s, threads, true);
    kc::flash_attention_forward(bf16_at(p.q), bf16_at(p.k), bf16_at(p.v), bf16_out_at(p.out), p.lse.data<float>(), s,
                                ws.data<float>(), threads);
    return;
  }
  AttentionViews views;
  const float* q = views.in(ctx, p.q);
  const float* k = views.in(ctx, p.k);
  const float* v = views.in(ctx, p.v);
  float* out = views.out(ctx, p.out, false);
  const Tensor ws = flash_workspace(ctx, s, threads, false);
  kc::flash_attention_forward(q, k, v, out, p.lse.data<float>(), s, ws.data<float>(), threads);
}

void attention_backward(const Context& ctx, const AttentionProblem& p) {
  const bool all_bf16 = all_bf16_operands({&p.q, &p.k, &p.v, &p.out, &p.dout, &p.dq, &p.dk, &p.dv});
  const kc::FlashAttentionShape s = flash_shape(p, all_bf16 && !bf16_kernel(ctx, all_bf16), ctx.attention_sums);
  const int threads = kc::kernel_threads();
  const bool acc = p.params.accumulate_grads;
  if (bf16_kernel(ctx, all_bf16)) {
    const Tensor ws = flash_workspace(ctx, s, threads, true);
    kc::flash_attention_backward(bf16_at(p.q), bf16_at(p.k), bf16_at(p.v), bf16_at(p.out), p.lse.data<float>(),
                                 bf16_at(p.dout), bf16_out_at(p.dq), bf16_out_at(p.dk), bf16_out_at(p.dv), s, acc,
                                 ws.data<float>(), threads);
    return;
  }
  AttentionViews views;
  const float* q = views.in(ctx, p.q);
  const float* k = views.in(ctx, p.k);
  const float* v = views.in(ctx, p.v);
  const float* out = views.in(ctx, p.out);
  const float* dout = views.in(ctx, p.dout);
  float* dq = views.out(ctx, p.dq, acc);
  float* dk = views.out(ctx, p.dk, acc);
  float* dv = views.out(ctx, p.dv, acc);
  const Tensor ws = flash_workspace(ctx, s, threads, false);
  kc::flash_attention_backward(q, k, v, out, p.lse.data<float>(), dout, dq, dk, dv, s, acc, ws.data<float>(),
                               threads);
}

void attention_merge(const Context& ctx, const Tensor& out_a, const Tensor& lse_a, const Tensor& out_b,
                     const Tensor& lse_b, const Tensor& out, const Tensor& lse) {
  F32In a(ctx, out_a), b(ctx, out_b);
  F32Out o(ctx, out, false);  // out may alias out_a / out_b: widened copies above; in f32 each element is read first
  kc::attention_merge(a.get(), lse_a.data<float>(), b.get(), lse_b.data<float>(), o.get(), lse.data<float>(),
                      out_a.dim(0), out_a.dim(1), lse_a.dim(1), out_a.dim(2) / lse_a.dim(1));
}

}  // namespace cleave::ops::cpu_detail
