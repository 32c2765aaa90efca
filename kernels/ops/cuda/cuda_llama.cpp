// The CUDA backend's Llama slots (contracts in ops.hpp "Llama pieces") over kernels/cuda/rmsnorm, swiglu and
// rope: RMSNorm, SwiGLU and rotary embeddings with grouped-query packing. Every floating tensor is f32 or bf16 on
// its own (Floats views: f32 arithmetic and statistics, one rounding per store); rstd and dweight are f32 (the
// seam checked it). rmsnorm_backward_weight accumulates deterministically through kWorkspace scratch (row-chunk
// partials added in order, no atomics); nothing else allocates. Compiled, not yet run on a GPU
// (tests/gpu/ops/llama_parity_test.cpp compares each slot with the CPU backend's).
#include "kernels/cuda/rmsnorm.hpp"
#include "kernels/cuda/rope.hpp"
#include "kernels/cuda/swiglu.hpp"
#include "kernels/ops/cuda/cuda_slots.hpp"

namespace cleave::ops::cuda_detail {
namespace {

kd::ConstFloats in(const Tensor& t) { return kd::ConstFloats(t.raw_data(), float_type(t)); }
kd::Floats out(const Tensor& t) { return kd::Floats(t.raw_data(), float_type(t)); }

// q (or dq) is [B, T, Hq*hd]: the seam checked the shapes (ops_llama.cpp check_rope_shapes).
kd::RopeShape rope_shape(const Tensor& q, const RopeParams& p) {
  return {q.dim(0), q.dim(1), p.q_heads, p.kv_heads, q.dim(2) / p.q_heads, p.theta, p.position_offset,
          p.packed_kv_heads()};
}

}  // namespace

void rmsnorm_forward(const Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& y, const Tensor& rstd,
                     float eps) {
  kd::rmsnorm_forward(in(x), in(weight), out(y), rstd.data<float>(), x.shape().rows(), x.shape().last(), eps,
                      stream_of(ctx));
}

void rmsnorm_backward_input(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& weight,
                            const Tensor& rstd, const Tensor& dx) {
  kd::rmsnorm_backward_input(in(dy), in(x), in(weight), rstd.data<float>(), out(dx), x.shape().rows(),
                             x.shape().last(), stream_of(ctx));
}

void rmsnorm_backward_weight(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& rstd,
                             const Tensor& dweight) {
  const std::int64_t rows = x.shape().rows(), cols = x.shape().last();
  const std::size_t bytes = kd::rmsnorm_backward_weight_workspace_size(rows, cols);
  Tensor ws = scratch(ctx, bytes);
  kd::rmsnorm_backward_weight(in(dy), in(x), rstd.data<float>(), dweight.data<float>(), rows, cols, ws.raw_data(),
                              bytes, stream_of(ctx));
}

void add_rmsnorm_forward(const Context& ctx, const Tensor& x, const Tensor& y, const Tensor& weight, const Tensor& r,
                         const Tensor& normed, const Tensor& rstd, float eps) {
  kd::add_rmsnorm_forward(in(x), in(y), in(weight), out(r), out(normed), rstd.data<float>(), x.shape().rows(),
                          x.shape().last(), eps, stream_of(ctx));
}

void add_rmsnorm_backward_input(const Context& ctx, const Tensor& dout, const Tensor& dresidual, const Tensor& r,
                                const Tensor& weight, const Tensor& rstd, const Tensor& dr) {
  kd::add_rmsnorm_backward_input(in(dout), in(dresidual), in(r), in(weight), rstd.data<float>(), out(dr),
                                 r.shape().rows(), r.shape().last(), stream_of(ctx));
}

void swiglu_forward(const Context& ctx, const Tensor& gate, const Tensor& up, const Tensor& h) {
  kd::swiglu_forward(in(gate), in(up), out(h), gate.numel(), stream_of(ctx));
}

void swiglu_backward(const Context& ctx, const Tensor& gate, const Tensor& up, const Tensor& dh, const Tensor& dgate,
                     const Tensor& dup) {
  kd::swiglu_backward(in(gate), in(up), in(dh), out(dgate), out(dup), gate.numel(), stream_of(ctx));
}

void rope_pack_qkv(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qkv,
                   const RopeParams& params) {
  kd::rope_pack_qkv(in(q), in(k), in(v), out(qkv), rope_shape(q, params), stream_of(ctx));
}

void rope_pack_qkv_backward(const Context& ctx, const Tensor& dqkv, const Tensor& dq, const Tensor& dk,
                            const Tensor& dv, const RopeParams& params) {
  kd::rope_pack_qkv_backward(in(dqkv), out(dq), out(dk), out(dv), rope_shape(dq, params), stream_of(ctx));
}

}  // namespace cleave::ops::cuda_detail
