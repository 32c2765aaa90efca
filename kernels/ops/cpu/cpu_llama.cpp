// The CPU backend's Llama slots (contracts in ops.hpp "Llama pieces"; checks in ops_llama.cpp): RMSNorm, the
// fused residual add + RMSNorm, SwiGLU and rotary embeddings with grouped-query packing. Row- and element-wise
// kernels run through run_chunked (cpu_chunked_view.hpp); RoPE converts a row at a time for all-bf16 calls. The
// chunk and row buffers and RoPE's table are the run's kernel scratch (cpu_scratch(ctx), cpu_resources.hpp).
// Invariant: the fused add + RMSNorm gives the bits of the unfused pair (add, then RMSNorm of the stored r), for
// f32 and bf16 r alike; every other slot the bits of its f32 kernel on the widened tensors.
#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>

#include "kernels/cpu/cast.hpp"
#include "kernels/cpu/elementwise.hpp"
#include "kernels/cpu/rmsnorm.hpp"
#include "kernels/cpu/rope.hpp"
#include "kernels/cpu/swiglu.hpp"
#include "kernels/ops/cpu/cpu_resources.hpp"
#include "kernels/ops/cpu/cpu_slots.hpp"
#include "kernels/ops/cpu_chunked_view.hpp"
#include "kernels/ops/cpu_f32_view.hpp"

namespace cleave::ops::cpu_detail {

void rmsnorm_forward(const Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& y, const Tensor& rstd,
                     float eps) {
  F32In w(ctx, weight);
  const float* wf = w.get();
  float* rf = rstd.data<float>();
  const int64_t cols = x.shape().last();
  run_chunked<1, 1>(cpu_scratch(ctx), {ChunkIn{&x}}, {ChunkOut{&y, false}}, x.shape().rows(), cols,
                    [=](const In1& in, const Out1& o, int64_t first, int64_t rows) {
                      kc::rmsnorm_forward(in[0], wf, o[0], rf + first, rows, cols, eps);
                    });
}

void rmsnorm_backward_input(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& weight,
                            const Tensor& rstd, const Tensor& dx) {
  F32In w(ctx, weight);
  const float* wf = w.get();
  const float* rf = rstd.data<float>();
  const int64_t cols = x.shape().last();
  run_chunked<2, 1>(cpu_scratch(ctx), {ChunkIn{&dy}, ChunkIn{&x}}, {ChunkOut{&dx, false}}, x.shape().rows(), cols,
                    [=](const In2& in, const Out1& o, int64_t first, int64_t rows) {
                      kc::rmsnorm_backward_input(in[0], in[1], wf, rf + first, o[0], rows, cols);
                    });
}

void rmsnorm_backward_weight(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& rstd,
                             const Tensor& dweight) {
  if (dy.dtype() == DType::kBF16 && x.dtype() == DType::kBF16) {
    kc::rmsnorm_backward_weight(cpu_detail::bf16_data(dy), cpu_detail::bf16_data(x), rstd.data<float>(),
                                dweight.data<float>(), x.shape().rows(), x.shape().last());
    return;
  }
  F32In d(ctx, dy), in(ctx, x);
  kc::rmsnorm_backward_weight(d.get(), in.get(), rstd.data<float>(), dweight.data<float>(), x.shape().rows(),
                              x.shape().last());
}

namespace {

// A chunk's f32 values rounded to bf16 and back (nearest even, cast.hpp): what a bf16 tensor would hold. Each
// element is rounded alone, so blocks of a stack buffer (a whole chunk unless a row is longer) give the bits of
// one pass, with no scratch kept between calls.
void round_through_bf16(float* p, int64_t n) {
  constexpr int64_t kBlock = kChunkElements;
  std::array<std::uint16_t, kBlock> bits;
  for (int64_t i = 0; i < n; i += kBlock) {
    const int64_t count = std::min(kBlock, n - i);
    kc::cast_f32_to_bf16(p + i, bits.data(), count);
    kc::cast_bf16_to_f32(bits.data(), p + i, count);
  }
}

}  // namespace

// The unfused pair's bits (ops.hpp): with an f32 r (dr) the fused row kernel; with a bf16 one the chunk's sum is
// rounded to bf16 before the norm reads it (the pair's norm reads the stored bf16 r), so the pair runs per chunk,
// still inside the cache.
void add_rmsnorm_forward(const Context& ctx, const Tensor& x, const Tensor& y, const Tensor& weight, const Tensor& r,
                         const Tensor& out, const Tensor& rstd, float eps) {
  F32In w(ctx, weight);
  const float* wf = w.get();
  float* rf = rstd.data<float>();
  const int64_t cols = x.shape().last();
  const bool bf16_r = r.dtype() == DType::kBF16;
  run_chunked<2, 2>(cpu_scratch(ctx), {ChunkIn{&x}, ChunkIn{&y}}, {ChunkOut{&r, false}, ChunkOut{&out, false}},
                    x.shape().rows(), cols,
                    [=](const In2& in, const Out2& o, int64_t first, int64_t rows) {
                      if (!bf16_r) {
                        kc::add_rmsnorm_forward(in[0], in[1], wf, o[0], o[1], rf + first, rows, cols, eps);
                        return;
                      }
                      kc::add(in[0], in[1], o[0], rows * cols);
                      round_through_bf16(o[0], rows * cols);
                      kc::rmsnorm_forward(o[0], wf, o[1], rf + first, rows, cols, eps);
                    });
}

void add_rmsnorm_backward_input(const Context& ctx, const Tensor& dout, const Tensor& dresidual, const Tensor& r,
                                const Tensor& weight, const Tensor& rstd, const Tensor& dr) {
  F32In w(ctx, weight);
  const float* wf = w.get();
  const float* rf = rstd.data<float>();
  const int64_t cols = r.shape().last();
  const bool bf16_dr = dr.dtype() == DType::kBF16;
  run_chunked<3, 1>(cpu_scratch(ctx), {ChunkIn{&dout}, ChunkIn{&dresidual}, ChunkIn{&r}}, {ChunkOut{&dr, false}},
                    r.shape().rows(), cols,
                    [=](const In3& in, const Out1& o, int64_t first, int64_t rows) {
                      if (!bf16_dr) {
                        kc::add_rmsnorm_backward_input(in[0], in[1], in[2], wf, rf + first, o[0], rows, cols);
                        return;
                      }
                      kc::rmsnorm_backward_input(in[0], in[2], wf, rf + first, o[0], rows, cols);
                      round_through_bf16(o[0], rows * cols);
                      kc::add_inplace(o[0], in[1], rows * cols);
                    });
}

void swiglu_forward(const Context& ctx, const Tensor& gate, const Tensor& up, const Tensor& h) {
  run_chunked<2, 1>(cpu_scratch(ctx), {ChunkIn{&gate}, ChunkIn{&up}}, {ChunkOut{&h, false}}, gate.numel(), 1,
                    [](const In2& in, const Out1& o, int64_t, int64_t n) {
                      kc::swiglu_forward(in[0], in[1], o[0], n);
                    });
}

void swiglu_backward(const Context& ctx, const Tensor& gate, const Tensor& up, const Tensor& dh, const Tensor& dgate,
                     const Tensor& dup) {
  run_chunked<3, 2>(cpu_scratch(ctx), {ChunkIn{&gate}, ChunkIn{&up}, ChunkIn{&dh}},
                    {ChunkOut{&dgate, false}, ChunkOut{&dup, false}},
                    gate.numel(), 1, [](const In3& in, const Out2& o, int64_t, int64_t n) {
                      kc::swiglu_backward(in[0], in[1], in[2], o[0], o[1], n);
                    });
}

namespace {

// q [B, T, Hq*hd] (the op checked the shapes): the kernel's shape from it and the params.
kc::RopeShape rope_shape(const Tensor& q, const RopeParams& p) {
  kc::RopeShape s;
  s.batch = q.dim(0);
  s.seq = q.dim(1);
  s.q_heads = p.q_heads;
  s.kv_heads = p.kv_heads;
  s.head_dim = q.dim(2) / p.q_heads;
  s.theta = p.theta;
  s.position_offset = p.position_offset;
  s.packed_kv_heads = p.packed_kv_heads();
  return s;
}

bool all_bf16(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (t->dtype() != DType::kBF16) return false;
  }
  return true;
}

}  // namespace

// All-bf16 calls (the mixed-precision step) convert a row at a time inside the kernel; other mixes widen whole
// tensors. Both give the same bits (rope.hpp).
void rope_pack_qkv(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qkv,
                   const RopeParams& params) {
  if (all_bf16({&q, &k, &v, &qkv})) {
    kc::rope_pack_qkv(cpu_detail::bf16_data(q), cpu_detail::bf16_data(k), cpu_detail::bf16_data(v),
                      cpu_detail::bf16_data(qkv), rope_shape(q, params), cpu_scratch(ctx));
    return;
  }
  F32In qi(ctx, q), ki(ctx, k), vi(ctx, v);
  F32Out out(ctx, qkv, false);
  kc::rope_pack_qkv(qi.get(), ki.get(), vi.get(), out.get(), rope_shape(q, params), cpu_scratch(ctx));
}

void rope_pack_qkv_backward(const Context& ctx, const Tensor& dqkv, const Tensor& dq, const Tensor& dk,
                            const Tensor& dv, const RopeParams& params) {
  if (all_bf16({&dqkv, &dq, &dk, &dv})) {
    kc::rope_pack_qkv_backward(cpu_detail::bf16_data(dqkv), cpu_detail::bf16_data(dq), cpu_detail::bf16_data(dk),
                               cpu_detail::bf16_data(dv), rope_shape(dq, params), cpu_scratch(ctx));
    return;
  }
  F32In in(ctx, dqkv);
  F32Out q(ctx, dq, false), k(ctx, dk, false), v(ctx, dv, false);
  kc::rope_pack_qkv_backward(in.get(), q.get(), k.get(), v.get(), rope_shape(dq, params), cpu_scratch(ctx));
}

}  // namespace cleave::ops::cpu_detail
