// The CUDA backend's attention slots (contracts in ops.hpp "Attention") over kernels/cuda/flash_attention:
// memory-efficient forward and backward (no [T, T] stash) and the log-sum-exp merge. The seam checked shapes and
// that every floating tensor shares one dtype; lse is f32. The backward's scratch (D, f32 per query row) comes from
// ctx.allocator (kWorkspace). Compiled, not yet run on a GPU (tests/gpu/ops/attention_parity_test.cpp compares each
// slot with the CPU backend's).
#include "engine/core/error.hpp"
#include "kernels/cuda/flash_attention.hpp"
#include "kernels/cuda/launch_config.hpp"
#include "kernels/ops/attention_limits.hpp"
#include "kernels/ops/attention_shape.hpp"
#include "kernels/ops/cuda/cuda_slots.hpp"

namespace cleave::ops::cuda_detail {
namespace {

static_assert(kCudaAttentionMaxHeadDim == kd::kFlashMaxHeadDim,
              "the config's limit is the kernels' (kernels/ops/attention_limits.hpp)");

kd::FlashAttentionShape flash_shape(const AttentionProblem& p) {
  const auto s = flash_shape_of<kd::FlashAttentionShape>(p);
  CLEAVE_CHECK(s.batch <= kd::launch::kMaxGridYZ && s.q_heads <= kd::launch::kMaxGridYZ,
               "attention on cuda: batch {} and heads {} must each be at most {} (grid limits)", s.batch, s.q_heads,
               kd::launch::kMaxGridYZ);
  return s;
}

// An operand's element pointer at its head-0 column (elements of its dtype).
const void* at(const AttentionOperand& op) {
  return static_cast<const char*>(op.t.raw_data()) + op.col * static_cast<std::int64_t>(dtype_size(op.t.dtype()));
}
void* at_mut(const AttentionOperand& op) {
  return static_cast<char*>(op.t.raw_data()) + op.col * static_cast<std::int64_t>(dtype_size(op.t.dtype()));
}

}  // namespace

void attention_forward(const Context& ctx, const AttentionProblem& p) {
  kd::flash_attention_forward(float_type(p.q.t), at(p.q), at(p.k), at(p.v), at_mut(p.out), p.lse.data<float>(),
                              flash_shape(p), stream_of(ctx));
}

void attention_backward(const Context& ctx, const AttentionProblem& p) {
  const kd::FlashAttentionShape s = flash_shape(p);
  const std::size_t bytes = kd::flash_attention_backward_workspace_size(s);
  const Tensor ws = scratch(ctx, bytes);
  kd::flash_attention_backward(float_type(p.q.t), at(p.q), at(p.k), at(p.v), at(p.out), p.lse.data<float>(),
                               at(p.dout), at_mut(p.dq), at_mut(p.dk), at_mut(p.dv), s, p.params.accumulate_grads,
                               ws.raw_data(), bytes, stream_of(ctx));
}

void attention_merge(const Context& ctx, const Tensor& out_a, const Tensor& lse_a, const Tensor& out_b,
                     const Tensor& lse_b, const Tensor& out, const Tensor& lse) {
  const std::int64_t heads = lse_a.dim(1);
  kd::attention_merge(float_type(out_a), out_a.raw_data(), lse_a.data<float>(), out_b.raw_data(), lse_b.data<float>(),
                      out.raw_data(), lse.data<float>(), out_a.dim(0), out_a.dim(1), heads, out_a.dim(2) / heads,
                      stream_of(ctx));
}

}  // namespace cleave::ops::cuda_detail
