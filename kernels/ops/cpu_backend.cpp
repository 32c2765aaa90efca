// The CPU backend: every slot of the seam over the f32 kernels of kernels/cpu. bf16 tensors are widened and
// narrowed at the kernel edges (cpu_f32_view.hpp), so arithmetic is f32 and results match the f32 kernels
// on the same (rounded) inputs. Deterministic mode (GemmMode::kDeterministic) slices GEMMs by shape.
// GEMMs run on the library of device.blas (ctx.cpu_blas); with bf16 operands on a library that has bf16
// kernels (oneDNN) the operands are not widened: bf16 products, f32 accumulation, C rounded once.
#include "kernels/cpu/adamw.hpp"
#include "kernels/cpu/bias.hpp"
#include "kernels/cpu/cast.hpp"
#include "kernels/cpu/blas_runtime.hpp"
#include "kernels/cpu/conv2d.hpp"
#include "kernels/cpu/cross_entropy.hpp"
#include "kernels/cpu/elementwise.hpp"
#include "kernels/cpu/embedding.hpp"
#include "kernels/cpu/flash_attention.hpp"
#include "kernels/cpu/gelu.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/layernorm.hpp"
#include "kernels/cpu/maxpool.hpp"
#include "kernels/cpu/relu.hpp"
#include "kernels/cpu/rmsnorm.hpp"
#include "kernels/cpu/rope.hpp"
#include "kernels/cpu/sgd.hpp"
#include "kernels/cpu/softmax.hpp"
#include "kernels/cpu/swiglu.hpp"
#include "kernels/cpu/moe.hpp"
#include "kernels/cpu/parallel.hpp"

#include <array>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "kernels/ops/attention_shape.hpp"
#include "kernels/ops/backend.hpp"
#include "kernels/ops/cpu_chunked_view.hpp"
#include "kernels/ops/cpu_f32_view.hpp"

namespace cleave::ops {
namespace {

namespace kc = kernels::cpu;
using cpu_detail::ChunkIn;
using cpu_detail::ChunkOut;
using cpu_detail::F32In;
using cpu_detail::F32Out;
using cpu_detail::run_chunked;
using In1 = std::array<const float*, 1>;
using In2 = std::array<const float*, 2>;
using In3 = std::array<const float*, 3>;
using Out1 = std::array<float*, 1>;
using Out2 = std::array<float*, 2>;

kc::GemmSlicing slicing(const Context& ctx) {
  return ctx.gemm_mode == GemmMode::kDeterministic ? kc::GemmSlicing::kShapeFixed : kc::GemmSlicing::kPerThread;
}

// The library for this GEMM (device.blas; "auto" resolved per operand dtype by cpu_blas.hpp's rule).
CpuGemmChoice gemm_choice(const Context& ctx, bool bf16_operands) {
  return resolved_cpu_gemm(ctx.cpu_blas, bf16_operands);
}

kc::GemmBackend gemm_library(CpuBlas library) {
  switch (library) {
    case CpuBlas::kBlis: return kc::GemmBackend::kBlis;
    case CpuBlas::kOneDnn: return kc::GemmBackend::kOneDnn;
    default: return kc::GemmBackend::kOpenBlas;
  }
}

// bf16 operands on a library with bf16 kernels: no widening; C written in its own dtype. A bias with alpha 1 and
// beta 0 (the forward of a Linear) goes to the library's epilogue: C = round(A B + bias) in one pass over C.
// Otherwise C goes through an f32 view when a bias follows (the bias is added in f32 and C rounded once).
void gemm_bf16_native(const Context& ctx, const GemmProblem& p, kc::GemmBackend library) {
  const auto* a = cpu_detail::bf16_data(p.a);
  const auto* b = cpu_detail::bf16_data(p.b);
  const bool bias = p.epilogue == GemmEpilogue::kBias;
  kc::Bf16GemmOut out;
  if (bias && p.alpha == 1.0f && p.beta == 0.0f) {
    F32In bias_f32(ctx, p.bias);
    if (p.c.dtype() == DType::kF32) {
      out.f32 = p.c.data<float>();
    } else {
      out.bf16 = cpu_detail::bf16_data(p.c);
    }
    kc::gemm_bf16_strided_batched(library, p.trans_a, p.trans_b, p.m, p.n, p.k, p.alpha, a, p.lda, p.stride_a, b,
                                  p.ldb, p.stride_b, p.beta, out, p.ldc, p.stride_c, p.batch, slicing(ctx),
                                  bias_f32.get());
    return;
  }
  std::optional<F32Out> c_view;
  if (p.c.dtype() == DType::kF32) {
    out.f32 = p.c.data<float>();
  } else if (bias) {
    out.f32 = c_view.emplace(ctx, p.c, p.beta != 0.0f).get();
  } else {
    out.bf16 = cpu_detail::bf16_data(p.c);
  }
  kc::gemm_bf16_strided_batched(library, p.trans_a, p.trans_b, p.m, p.n, p.k, p.alpha, a, p.lda, p.stride_a, b, p.ldb,
                                p.stride_b, p.beta, out, p.ldc, p.stride_c, p.batch, slicing(ctx));
  if (bias) {
    F32In bias_f32(ctx, p.bias);
    kc::bias_add_forward(out.f32, bias_f32.get(), p.batch * p.m, p.n);
  }
}

void gemm(const Context& ctx, const GemmProblem& p) {
  const CpuGemmChoice choice = gemm_choice(ctx, p.a.dtype() == DType::kBF16);
  const kc::GemmBackend library = gemm_library(choice.library);
  if (choice.bf16_kernels) {
    gemm_bf16_native(ctx, p, library);
    return;
  }
  F32In a(ctx, p.a), b(ctx, p.b);
  F32Out c(ctx, p.c, p.beta != 0.0f);
  if (p.batch == 1) {
    kc::gemm(p.trans_a, p.trans_b, p.m, p.n, p.k, p.alpha, a.get(), p.lda, b.get(), p.ldb, p.beta, c.get(), p.ldc,
             slicing(ctx), library);
  } else {
    kc::gemm_strided_batched(p.trans_a, p.trans_b, p.m, p.n, p.k, p.alpha, a.get(), p.lda, p.stride_a, b.get(), p.ldb,
                             p.stride_b, p.beta, c.get(), p.ldc, p.stride_c, p.batch, slicing(ctx), library);
  }
  if (p.epilogue == GemmEpilogue::kBias) {
    F32In bias(ctx, p.bias);
    kc::bias_add_forward(c.get(), bias.get(), p.batch * p.m, p.n);
  }
}

void fill(const Context& ctx, const Tensor& t, float value) {
  F32Out out(ctx, t, false);
  float* d = out.get();
  for (std::int64_t i = 0; i < t.numel(); ++i) d[i] = value;
}

void copy(const Context& ctx, const Tensor& src, const Tensor& dst) {
  if (src.dtype() == dst.dtype()) {
    if (src.raw_data() != dst.raw_data()) std::memcpy(dst.raw_data(), src.raw_data(), src.nbytes());
    return;
  }
  if (dst.dtype() == DType::kBF16) {
    kc::cast_f32_to_bf16(src.data<float>(), cpu_detail::bf16_data(dst), src.numel());
  } else {
    kc::cast_bf16_to_f32(cpu_detail::bf16_data(src), dst.data<float>(), src.numel());
  }
  (void)ctx;
}

void copy_2d(const Context& ctx, const Tensor& src, const Tensor& dst, const Copy2d& s) {
  const std::size_t elem = dtype_size(src.dtype());
  const auto* from = static_cast<const unsigned char*>(src.raw_data());
  auto* to = static_cast<unsigned char*>(dst.raw_data());
  CLEAVE_PARALLEL_FOR(r, s.rows, s.rows * s.cols > (1 << 16),
                      std::memcpy(to + static_cast<std::size_t>(s.dst_offset + r * s.dst_stride) * elem,
                                  from + static_cast<std::size_t>(s.src_offset + r * s.src_stride) * elem,
                                  static_cast<std::size_t>(s.cols) * elem);)
  (void)ctx;
}

// Element-wise and row-wise kernels run through run_chunked (cpu_chunked_view.hpp): bf16 tensors are widened
// and narrowed a cache-sized chunk at a time, all-f32 calls run the kernel once.
void add(const Context&, const Tensor& a, const Tensor& b, const Tensor& out) {
  run_chunked<2, 1>({ChunkIn{&a}, ChunkIn{&b}}, {ChunkOut{&out, false}}, a.numel(), 1,
                    [](const In2& in, const Out1& o, int64_t, int64_t n) { kc::add(in[0], in[1], o[0], n); });
}

void add_inplace(const Context&, const Tensor& y, const Tensor& x) {
  run_chunked<1, 1>({ChunkIn{&x}}, {ChunkOut{&y, true}}, y.numel(), 1,
                    [](const In1& in, const Out1& o, int64_t, int64_t n) { kc::add_inplace(o[0], in[0], n); });
}

void scale_chunked(const Tensor& y, float alpha) {
  run_chunked<0, 1>({}, {ChunkOut{&y, true}}, y.numel(), 1,
                    [alpha](const std::array<const float*, 0>&, const Out1& o, int64_t, int64_t n) {
                      kc::scale_inplace(o[0], alpha, n);
                    });
}

void scale_inplace(const Context&, const Tensor& y, float alpha) { scale_chunked(y, alpha); }

// The f32 tensors in one kernel call (one OpenMP team, elementwise.hpp); a bf16 one through scale_inplace's
// chunked widen-scale-narrow, as alone (the tensors do not overlap, so the order between the two groups is free).
void scale_inplace_many(const Context&, std::span<const Tensor> ys, float alpha) {
  std::vector<kc::FloatSpan> f32;
  f32.reserve(ys.size());
  for (const Tensor& y : ys) {
    if (y.dtype() == DType::kF32) f32.push_back({y.data<float>(), y.numel()});
    else scale_chunked(y, alpha);
  }
  kc::scale_inplace_many(f32.data(), static_cast<std::int64_t>(f32.size()), alpha);
}

void axpy(const Context&, float alpha, const Tensor& x, const Tensor& y) {
  run_chunked<1, 1>({ChunkIn{&x}}, {ChunkOut{&y, true}}, y.numel(), 1,
                    [alpha](const In1& in, const Out1& o, int64_t, int64_t n) { kc::axpy(alpha, in[0], o[0], n); });
}

double sum_squares(const Context& ctx, const Tensor& x) {
  F32In in(ctx, x);
  return kc::sum_squares(in.get(), x.numel());
}

// The order grad_clip has always summed in: total += sum_squares(x), x in order.
double sum_squares_many(const Context& ctx, std::span<const Tensor> xs) {
  double total = 0.0;
  for (const Tensor& x : xs) {
    F32In in(ctx, x);
    total += kc::sum_squares(in.get(), x.numel());  // the sum_squares slot's value
  }
  return total;
}

// All tensors in one kernel call (one OpenMP team: the sum is exact, so the digits are those of each tensor in
// turn). A bf16 tensor is widened whole, as alone.
kernels::ExactSquareSum sum_squares_exact(const Context& ctx, std::span<const Tensor> xs) {
  std::vector<std::unique_ptr<F32In>> widened;
  std::vector<kc::ConstFloatSpan> spans;
  spans.reserve(xs.size());
  for (const Tensor& x : xs) {
    const float* data =
        x.dtype() == DType::kF32 ? x.data<float>() : widened.emplace_back(std::make_unique<F32In>(ctx, x))->get();
    spans.push_back({data, x.numel()});
  }
  kernels::ExactSquareSum total;
  kc::sum_squares_exact_many(spans.data(), static_cast<std::int64_t>(spans.size()), total);
  return total;
}

void bias_add_forward(const Context& ctx, const Tensor& y, const Tensor& bias) {
  F32In b(ctx, bias);
  const float* bias_f32 = b.get();
  const int64_t cols = y.shape().last();
  run_chunked<0, 1>({}, {ChunkOut{&y, true}}, y.shape().rows(), cols,
                    [bias_f32, cols](const std::array<const float*, 0>&, const Out1& o, int64_t, int64_t rows) {
                      kc::bias_add_forward(o[0], bias_f32, rows, cols);
                    });
}

// The weight gradients read a bf16 dy (and x) a row segment at a time, with the bits of the widened tensors'.
void bias_backward(const Context& ctx, const Tensor& dy, const Tensor& dbias) {
  if (dy.dtype() == DType::kBF16) {
    kc::bias_backward(cpu_detail::bf16_data(dy), dbias.data<float>(), dy.shape().rows(), dy.shape().last());
    return;
  }
  F32In d(ctx, dy);
  kc::bias_backward(d.get(), dbias.data<float>(), dy.shape().rows(), dy.shape().last());
}

template <void (*Kernel)(const float*, float*, int64_t)>
void unary(const Context&, const Tensor& x, const Tensor& y) {
  run_chunked<1, 1>({ChunkIn{&x}}, {ChunkOut{&y, false}}, x.numel(), 1,
                    [](const In1& in, const Out1& o, int64_t, int64_t n) { Kernel(in[0], o[0], n); });
}

template <void (*Kernel)(const float*, const float*, float*, int64_t)>
void unary_backward(const Context&, const Tensor& x, const Tensor& dy, const Tensor& dx) {
  run_chunked<2, 1>({ChunkIn{&x}, ChunkIn{&dy}}, {ChunkOut{&dx, false}}, x.numel(), 1,
                    [](const In2& in, const Out1& o, int64_t, int64_t n) { Kernel(in[0], in[1], o[0], n); });
}

void softmax_forward(const Context& ctx, const Tensor& x, const Tensor& y) {
  F32In in(ctx, x);
  F32Out out(ctx, y, false);
  kc::softmax_forward(in.get(), out.get(), x.shape().rows(), x.shape().last());
}

void softmax_backward(const Context& ctx, const Tensor& y, const Tensor& dy, const Tensor& dx) {
  F32In in(ctx, y), d(ctx, dy);
  F32Out out(ctx, dx, false);
  kc::softmax_backward(in.get(), d.get(), out.get(), y.shape().rows(), y.shape().last());
}

void layernorm_forward(const Context& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd, float eps) {
  F32In g(ctx, gamma), b(ctx, beta);
  const float *gf = g.get(), *bf = b.get();
  float *mf = mean.data<float>(), *rf = rstd.data<float>();
  const int64_t cols = x.shape().last();
  run_chunked<1, 1>({ChunkIn{&x}}, {ChunkOut{&y, false}}, x.shape().rows(), cols,
                    [=](const In1& in, const Out1& o, int64_t first, int64_t rows) {
                      kc::layernorm_forward(in[0], gf, bf, o[0], mf + first, rf + first, rows, cols, eps);
                    });
}

void layernorm_backward_input(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& gamma,
                              const Tensor& mean, const Tensor& rstd, const Tensor& dx) {
  F32In g(ctx, gamma);
  const float* gf = g.get();
  const float *mf = mean.data<float>(), *rf = rstd.data<float>();
  const int64_t cols = x.shape().last();
  run_chunked<2, 1>({ChunkIn{&dy}, ChunkIn{&x}}, {ChunkOut{&dx, false}}, x.shape().rows(), cols,
                    [=](const In2& in, const Out1& o, int64_t first, int64_t rows) {
                      kc::layernorm_backward_input(in[0], in[1], gf, mf + first, rf + first, o[0], rows, cols);
                    });
}

void layernorm_backward_weight(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& mean,
                               const Tensor& rstd, const Tensor& dgamma, const Tensor& dbeta) {
  if (dy.dtype() == DType::kBF16 && x.dtype() == DType::kBF16) {
    kc::layernorm_backward_weight(cpu_detail::bf16_data(dy), cpu_detail::bf16_data(x), mean.data<float>(),
                                  rstd.data<float>(), dgamma.data<float>(), dbeta.data<float>(), x.shape().rows(),
                                  x.shape().last());
    return;
  }
  F32In d(ctx, dy), in(ctx, x);
  kc::layernorm_backward_weight(d.get(), in.get(), mean.data<float>(), rstd.data<float>(), dgamma.data<float>(),
                                dbeta.data<float>(), x.shape().rows(), x.shape().last());
}

// f32 views of an attention problem's operands: a tensor that several operands share (the packed qkv, dqkv) is
// widened once; pointers address each operand's head 0 column.
class AttentionViews {
 public:
  const float* in(const Context& ctx, const AttentionOperand& op) {
    for (auto& [t, view] : ins_) {
      if (t.raw_data() == op.t.raw_data()) return view->get() + op.col;
    }
    ins_.emplace_back(op.t, std::make_unique<F32In>(ctx, op.t));
    return ins_.back().second->get() + op.col;
  }
  float* out(const Context& ctx, const AttentionOperand& op, bool read) {
    for (auto& [t, view] : outs_) {
      if (t.raw_data() == op.t.raw_data()) return view->get() + op.col;
    }
    outs_.emplace_back(op.t, std::make_unique<F32Out>(ctx, op.t, read));
    return outs_.back().second->get() + op.col;
  }

 private:
  std::vector<std::pair<Tensor, std::unique_ptr<F32In>>> ins_;
  std::vector<std::pair<Tensor, std::unique_ptr<F32Out>>> outs_;
};

kc::FlashAttentionShape flash_shape(const AttentionProblem& p) { return flash_shape_of<kc::FlashAttentionShape>(p); }

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

// All-bf16 problems (the mixed-precision step) go to the kernels' bf16 overloads, which widen a block at a time
// with the bits of the whole-tensor views (flash_attention.hpp); other mixes widen whole tensors.
void attention_forward(const Context& ctx, const AttentionProblem& p) {
  const kc::FlashAttentionShape s = flash_shape(p);
  const int threads = kc::kernel_threads();
  if (all_bf16_operands({&p.q, &p.k, &p.v, &p.out})) {
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
  const kc::FlashAttentionShape s = flash_shape(p);
  const int threads = kc::kernel_threads();
  const bool acc = p.params.accumulate_grads;
  if (all_bf16_operands({&p.q, &p.k, &p.v, &p.out, &p.dout, &p.dq, &p.dk, &p.dv})) {
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

void rmsnorm_forward(const Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& y, const Tensor& rstd,
                     float eps) {
  F32In w(ctx, weight);
  const float* wf = w.get();
  float* rf = rstd.data<float>();
  const int64_t cols = x.shape().last();
  run_chunked<1, 1>({ChunkIn{&x}}, {ChunkOut{&y, false}}, x.shape().rows(), cols,
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
  run_chunked<2, 1>({ChunkIn{&dy}, ChunkIn{&x}}, {ChunkOut{&dx, false}}, x.shape().rows(), cols,
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

// A chunk's f32 values rounded to bf16 and back (nearest even, cast.hpp): what a bf16 tensor would hold.
void round_through_bf16(float* p, int64_t n) {
  thread_local std::vector<std::uint16_t> bits;
  if (bits.size() < static_cast<std::size_t>(n)) bits.resize(static_cast<std::size_t>(n));
  kc::cast_f32_to_bf16(p, bits.data(), n);
  kc::cast_bf16_to_f32(bits.data(), p, n);
}

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
  run_chunked<2, 2>({ChunkIn{&x}, ChunkIn{&y}}, {ChunkOut{&r, false}, ChunkOut{&out, false}}, x.shape().rows(), cols,
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
  run_chunked<3, 1>({ChunkIn{&dout}, ChunkIn{&dresidual}, ChunkIn{&r}}, {ChunkOut{&dr, false}}, r.shape().rows(), cols,
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

void swiglu_forward(const Context&, const Tensor& gate, const Tensor& up, const Tensor& h) {
  run_chunked<2, 1>({ChunkIn{&gate}, ChunkIn{&up}}, {ChunkOut{&h, false}}, gate.numel(), 1,
                    [](const In2& in, const Out1& o, int64_t, int64_t n) { kc::swiglu_forward(in[0], in[1], o[0], n); });
}

void swiglu_backward(const Context&, const Tensor& gate, const Tensor& up, const Tensor& dh, const Tensor& dgate,
                     const Tensor& dup) {
  run_chunked<3, 2>({ChunkIn{&gate}, ChunkIn{&up}, ChunkIn{&dh}}, {ChunkOut{&dgate, false}, ChunkOut{&dup, false}},
                    gate.numel(), 1, [](const In3& in, const Out2& o, int64_t, int64_t n) {
                      kc::swiglu_backward(in[0], in[1], in[2], o[0], o[1], n);
                    });
}

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

// All-bf16 calls (the mixed-precision step) convert a row at a time inside the kernel; other mixes widen whole
// tensors. Both give the same bits (rope.hpp).
void rope_pack_qkv(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qkv,
                   const RopeParams& params) {
  if (all_bf16({&q, &k, &v, &qkv})) {
    kc::rope_pack_qkv(cpu_detail::bf16_data(q), cpu_detail::bf16_data(k), cpu_detail::bf16_data(v),
                      cpu_detail::bf16_data(qkv), rope_shape(q, params));
    return;
  }
  F32In qi(ctx, q), ki(ctx, k), vi(ctx, v);
  F32Out out(ctx, qkv, false);
  kc::rope_pack_qkv(qi.get(), ki.get(), vi.get(), out.get(), rope_shape(q, params));
}

void rope_pack_qkv_backward(const Context& ctx, const Tensor& dqkv, const Tensor& dq, const Tensor& dk,
                            const Tensor& dv, const RopeParams& params) {
  if (all_bf16({&dqkv, &dq, &dk, &dv})) {
    kc::rope_pack_qkv_backward(cpu_detail::bf16_data(dqkv), cpu_detail::bf16_data(dq), cpu_detail::bf16_data(dk),
                               cpu_detail::bf16_data(dv), rope_shape(dq, params));
    return;
  }
  F32In in(ctx, dqkv);
  F32Out q(ctx, dq, false), k(ctx, dk, false), v(ctx, dv, false);
  kc::rope_pack_qkv_backward(in.get(), q.get(), k.get(), v.get(), rope_shape(dq, params));
}

void embedding_forward(const Context& ctx, const Tensor& ids, const Tensor& table, const Tensor& out,
                       const VocabRange& range) {
  F32In tab(ctx, table);
  F32Out o(ctx, out, false);
  kc::embedding_forward_shard(ids.data<std::int32_t>(), tab.get(), o.get(), ids.numel(), table.dim(1), range.vocab,
                              range.first, range.valid);
}

void embedding_backward(const Context& ctx, const Tensor& ids, const Tensor& dout, const Tensor& dtable,
                        const VocabRange& range) {
  F32In d(ctx, dout);
  kc::embedding_backward_shard(ids.data<std::int32_t>(), d.get(), dtable.data<float>(), ids.numel(), dtable.dim(1),
                               range.first, range.valid);
}

void moe_gather(const Context& ctx, const Tensor& x, const Tensor& index, const Tensor& scale, const Tensor& out) {
  F32In in(ctx, x);
  F32Out o(ctx, out, false);
  kc::moe_gather(in.get(), index.data<std::int32_t>(), scale.defined() ? scale.data<float>() : nullptr, o.get(),
                 index.numel(), x.numel() / x.shape().last(), x.shape().last());
}

void moe_combine(const Context& ctx, const Tensor& src, const Tensor& rows, const Tensor& weight, const Tensor& out) {
  F32In in(ctx, src);
  F32Out o(ctx, out, false);
  kc::moe_combine(in.get(), rows.data<std::int32_t>(), weight.defined() ? weight.data<float>() : nullptr, o.get(),
                  rows.dim(0), rows.dim(1), src.numel() / src.shape().last(), src.shape().last());
}

void moe_combine_weight_grad(const Context& ctx, const Tensor& dy, const Tensor& src, const Tensor& rows,
                             const Tensor& dweight) {
  F32In g(ctx, dy), in(ctx, src);
  kc::moe_combine_weight_grad(g.get(), in.get(), rows.data<std::int32_t>(), dweight.data<float>(), rows.dim(0),
                              rows.dim(1), src.numel() / src.shape().last(), src.shape().last());
}

void position_embedding_forward(const Context& ctx, const Tensor& x, const Tensor& pos) {
  F32In p(ctx, pos);
  F32Out out(ctx, x, true);
  kc::position_embedding_forward(out.get(), p.get(), x.dim(0), x.dim(1), x.dim(2));
}

void position_embedding_backward(const Context& ctx, const Tensor& dx, const Tensor& dpos) {
  F32In d(ctx, dx);
  kc::position_embedding_backward(d.get(), dpos.data<float>(), dx.dim(0), dx.dim(1), dx.dim(2));
}

// loss[0] = sum / valid rows (0 when none), as float.
void write_mean_loss(const Tensor& loss, double sum, const Tensor& targets) {
  const std::int64_t valid = kc::count_valid_targets(targets.data<std::int32_t>(), targets.numel());
  loss.data<float>()[0] = valid > 0 ? static_cast<float>(sum / static_cast<double>(valid)) : 0.0f;
}

// The cross-entropy kernels read bf16 logits a row at a time (cross_entropy.hpp), with the bits of the widened
// tensor's; f32 logits are used in place.
void cross_entropy_forward(const Context& ctx, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                           const Tensor& loss) {
  (void)ctx;
  const std::int64_t rows = logits.shape().rows(), classes = logits.shape().last();
  const std::int32_t* t = targets.data<std::int32_t>();
  const double sum = logits.dtype() == DType::kBF16
                         ? kc::softmax_cross_entropy_forward(cpu_detail::bf16_data(logits), t, lse.data<float>(), rows,
                                                             classes)
                         : kc::softmax_cross_entropy_forward(logits.data<float>(), t, lse.data<float>(), rows, classes);
  write_mean_loss(loss, sum, targets);
}

void cross_entropy_backward(const Context& ctx, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                            const Tensor& dloss, const Tensor& dlogits, const VocabRange& range) {
  const std::int64_t rows = logits.shape().rows(), classes = logits.shape().last();
  const std::int32_t* t = targets.data<std::int32_t>();
  const std::int64_t valid_rows = kc::count_valid_targets(t, rows);
  const float scale = valid_rows > 0 ? dloss.data<float>()[0] / static_cast<float>(valid_rows) : 0.0f;
  if (logits.dtype() == DType::kBF16) {
    const auto* x = cpu_detail::bf16_data(logits);
    if (dlogits.dtype() == DType::kBF16) {
      kc::softmax_cross_entropy_backward_shard(x, t, range.first, lse.data<float>(), scale,
                                               cpu_detail::bf16_data(dlogits), rows, classes, range.vocab,
                                               range.valid);
    } else {
      kc::softmax_cross_entropy_backward_shard(x, t, range.first, lse.data<float>(), scale, dlogits.data<float>(),
                                               rows, classes, range.vocab, range.valid);
    }
    return;
  }
  F32Out out(ctx, dlogits, false);  // an f32 logits with a bf16 dlogits: narrowed whole
  kc::softmax_cross_entropy_backward_shard(logits.data<float>(), t, range.first, lse.data<float>(), scale, out.get(),
                                           rows, classes, range.vocab, range.valid);
}

void cross_entropy_shard_max(const Context& ctx, const Tensor& logits, const VocabRange& range,
                             const Tensor& row_max) {
  (void)ctx;
  const std::int64_t rows = logits.shape().rows(), classes = logits.shape().last();
  if (logits.dtype() == DType::kBF16) {
    kc::cross_entropy_shard_max(cpu_detail::bf16_data(logits), row_max.data<float>(), rows, classes, range.valid);
  } else {
    kc::cross_entropy_shard_max(logits.data<float>(), row_max.data<float>(), rows, classes, range.valid);
  }
}

void cross_entropy_shard_sum_exp_and_target(const Context& ctx, const Tensor& logits, const Tensor& targets,
                                            const VocabRange& range, const Tensor& row_max, const Tensor& sums) {
  (void)ctx;
  const std::int64_t rows = logits.shape().rows(), width = logits.shape().last();
  float* sum_exp = sums.data<float>();
  const std::int32_t* t = targets.data<std::int32_t>();
  if (logits.dtype() == DType::kBF16) {
    const auto* x = cpu_detail::bf16_data(logits);
    kc::cross_entropy_shard_sum_exp(x, row_max.data<float>(), sum_exp, rows, width, range.valid);
    kc::cross_entropy_shard_target_logit(x, t, range.first, sum_exp + rows, rows, width, range.vocab, range.valid);
    return;
  }
  const float* x = logits.data<float>();
  kc::cross_entropy_shard_sum_exp(x, row_max.data<float>(), sum_exp, rows, width, range.valid);
  kc::cross_entropy_shard_target_logit(x, t, range.first, sum_exp + rows, rows, width, range.vocab, range.valid);
}

void cross_entropy_loss(const Context& ctx, const Tensor& row_max, const Tensor& sums, const Tensor& targets,
                        const Tensor& lse, const Tensor& loss) {
  (void)ctx;
  const std::int64_t rows = row_max.numel();
  const float* mx = row_max.data<float>();
  const float* sum_exp = sums.data<float>();
  const float* target_logit = sum_exp + rows;
  const std::int32_t* t = targets.data<std::int32_t>();
  float* out = lse.data<float>();
  double total = 0.0;  // row order, as the fused forward
  for (std::int64_t r = 0; r < rows; ++r) {
    out[r] = mx[r] + std::log(sum_exp[r]);
    if (t[r] >= 0) total += static_cast<double>(out[r]) - static_cast<double>(target_logit[r]);
  }
  write_mean_loss(loss, total, targets);
}

void cross_entropy_shard_argmax(const Context& ctx, const Tensor& logits, const VocabRange& range,
                                const Tensor& row_max, const Tensor& neg_index) {
  (void)ctx;
  const std::int64_t rows = logits.shape().rows(), classes = logits.shape().last();
  if (logits.dtype() == DType::kBF16) {
    kc::cross_entropy_shard_argmax(cpu_detail::bf16_data(logits), row_max.data<float>(), range.first,
                                   neg_index.data<float>(), rows, classes, range.valid);
  } else {
    kc::cross_entropy_shard_argmax(logits.data<float>(), row_max.data<float>(), range.first, neg_index.data<float>(),
                                   rows, classes, range.valid);
  }
}

CorrectCount count_correct(const Context& ctx, const Tensor& neg_index, const Tensor& targets) {
  (void)ctx;
  CorrectCount count;
  const float* index = neg_index.data<float>();
  const std::int32_t* t = targets.data<std::int32_t>();
  for (std::int64_t r = 0; r < targets.numel(); ++r) {
    if (t[r] < 0) continue;
    ++count.rows;
    if (-index[r] == static_cast<float>(t[r])) ++count.correct;
  }
  return count;
}

kc::Conv2dShape conv_shape(const Tensor& x, const Tensor& weight, const Conv2dParams& params) {
  kc::Conv2dShape s;
  s.batch = x.dim(0);
  s.in_channels = x.dim(1);
  s.height = x.dim(2);
  s.width = x.dim(3);
  s.out_channels = weight.dim(0);
  s.kernel = weight.dim(2);
  s.stride = params.stride;
  s.padding = params.padding;
  kc::conv2d_check_shape(s);
  return s;
}

Tensor conv_workspace(const Context& ctx, const kc::Conv2dShape& s) {
  return Tensor::empty(Shape{kc::conv2d_workspace_floats(s)}, DType::kF32, MemoryCategory::kWorkspace,
                       *ctx.allocator);
}

void conv2d_forward(const Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y,
                    const Conv2dParams& params) {
  const kc::Conv2dShape s = conv_shape(x, weight, params);
  CLEAVE_CHECK(y.numel() == s.batch * s.out_channels * s.out_height() * s.out_width(),
               "conv2d_forward: y {} should be [{}, {}, {}, {}]", y.shape().str(), s.batch, s.out_channels,
               s.out_height(), s.out_width());
  F32In in(ctx, x), w(ctx, weight), b(ctx, bias);
  F32Out out(ctx, y, false);
  Tensor ws = conv_workspace(ctx, s);
  kc::conv2d_forward(s, in.get(), w.get(), b.get(), out.get(), ws.data<float>(), slicing(ctx));
}

void conv2d_backward_input(const Context& ctx, const Tensor& dy, const Tensor& weight, const Tensor& dx,
                           const Conv2dParams& params) {
  const kc::Conv2dShape s = conv_shape(dx, weight, params);
  F32In d(ctx, dy), w(ctx, weight);
  F32Out out(ctx, dx, false);
  Tensor ws = conv_workspace(ctx, s);
  kc::conv2d_backward_input(s, d.get(), w.get(), out.get(), ws.data<float>(), slicing(ctx));
}

void conv2d_backward_weight(const Context& ctx, const Tensor& x, const Tensor& dy, const Tensor& dweight,
                            const Tensor& dbias, const Conv2dParams& params) {
  const kc::Conv2dShape s = conv_shape(x, dweight, params);
  F32In in(ctx, x), d(ctx, dy);
  Tensor ws = conv_workspace(ctx, s);
  kc::conv2d_backward_weight(s, in.get(), d.get(), dweight.data<float>(),
                             dbias.defined() ? dbias.data<float>() : nullptr, ws.data<float>(), slicing(ctx));
}

void maxpool2d_forward(const Context& ctx, const Tensor& x, const Tensor& y, const Tensor& argmax,
                       std::int64_t window, std::int64_t stride) {
  F32In in(ctx, x);
  F32Out out(ctx, y, false);
  kc::maxpool2d_forward(in.get(), out.get(), argmax.data<std::int32_t>(), x.dim(0), x.dim(1), x.dim(2), x.dim(3),
                        window, stride);
}

void maxpool2d_backward(const Context& ctx, const Tensor& dy, const Tensor& argmax, const Tensor& dx,
                        std::int64_t window, std::int64_t stride) {
  F32In d(ctx, dy);
  F32Out out(ctx, dx, false);
  kc::maxpool2d_backward(d.get(), argmax.data<std::int32_t>(), out.get(), dx.dim(0), dx.dim(1), dx.dim(2), dx.dim(3),
                         window, stride);
}

void adamw_update(const Context& ctx, const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                  const AdamWHyper& h) {
  F32In g(ctx, grad);
  kc::adamw_update(param.data<float>(), g.get(), m.data<float>(), v.data<float>(), param.numel(), h.lr, h.beta1,
                   h.beta2, h.eps, h.weight_decay, h.step);
}

void sgd_update(const Context& ctx, const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                const SgdHyper& h) {
  F32In g(ctx, grad);
  kc::sgd_update(param.data<float>(), g.get(), momentum_buf.defined() ? momentum_buf.data<float>() : nullptr,
                 param.numel(), h.lr, h.momentum, h.weight_decay, h.nesterov, h.first_step);
}

// All items in one kernel call (one OpenMP team; adamw.hpp, sgd.hpp). A bf16 grad is widened whole, as above.
void adamw_update_many(const Context& ctx, std::span<const AdamWItem> items, const AdamWHyper& h) {
  std::vector<std::unique_ptr<F32In>> widened;
  std::vector<kc::AdamWTensor> tensors;
  tensors.reserve(items.size());
  for (const AdamWItem& item : items) {
    const float* grad = item.grad.dtype() == DType::kF32
                            ? item.grad.data<float>()
                            : widened.emplace_back(std::make_unique<F32In>(ctx, item.grad))->get();
    tensors.push_back({item.param.data<float>(), grad, item.m.data<float>(), item.v.data<float>(), item.param.numel(),
                       item.weight_decay});
  }
  kc::adamw_update_many(tensors.data(), static_cast<std::int64_t>(tensors.size()), h.lr, h.beta1, h.beta2, h.eps,
                        h.step);
}

void sgd_update_many(const Context& ctx, std::span<const SgdItem> items, const SgdHyper& h) {
  std::vector<std::unique_ptr<F32In>> widened;
  std::vector<kc::SgdTensor> tensors;
  tensors.reserve(items.size());
  for (const SgdItem& item : items) {
    const float* grad = item.grad.dtype() == DType::kF32
                            ? item.grad.data<float>()
                            : widened.emplace_back(std::make_unique<F32In>(ctx, item.grad))->get();
    tensors.push_back({item.param.data<float>(), grad,
                       item.momentum_buf.defined() ? item.momentum_buf.data<float>() : nullptr, item.param.numel(),
                       item.weight_decay});
  }
  kc::sgd_update_many(tensors.data(), static_cast<std::int64_t>(tensors.size()), h.lr, h.momentum, h.nesterov,
                      h.first_step);
}

// The CPU kernels throw on bad user data at once: nothing is ever deferred.
void check_device_status(const Context&) {}

// Both sides are host memory here (the op checked they are on the CPU).
void transfer(const Context&, const Tensor& src, const Tensor& dst) {
  if (src.raw_data() != dst.raw_data() && src.nbytes() > 0) std::memcpy(dst.raw_data(), src.raw_data(), src.nbytes());
}

void synchronize(const Context&) {}  // CPU work has finished when its call returns

constexpr Backend kCpuBackend{
    .name = "cpu",
    .gemm = gemm,
    .fill = fill,
    .copy = copy,
    .copy_2d = copy_2d,
    .add = add,
    .add_inplace = add_inplace,
    .scale_inplace = scale_inplace,
    .scale_inplace_many = scale_inplace_many,
    .axpy = axpy,
    .sum_squares = sum_squares,
    .sum_squares_many = sum_squares_many,
    .sum_squares_exact = sum_squares_exact,
    .bias_add_forward = bias_add_forward,
    .bias_backward = bias_backward,
    .gelu_forward = unary<kc::gelu_forward>,
    .gelu_backward = unary_backward<kc::gelu_backward>,
    .relu_forward = unary<kc::relu_forward>,
    .relu_backward = unary_backward<kc::relu_backward>,
    .softmax_forward = softmax_forward,
    .softmax_backward = softmax_backward,
    .layernorm_forward = layernorm_forward,
    .layernorm_backward_input = layernorm_backward_input,
    .layernorm_backward_weight = layernorm_backward_weight,
    .attention_forward = attention_forward,
    .attention_backward = attention_backward,
    .attention_merge = attention_merge,
    .rmsnorm_forward = rmsnorm_forward,
    .rmsnorm_backward_input = rmsnorm_backward_input,
    .rmsnorm_backward_weight = rmsnorm_backward_weight,
    .add_rmsnorm_forward = add_rmsnorm_forward,
    .add_rmsnorm_backward_input = add_rmsnorm_backward_input,
    .swiglu_forward = swiglu_forward,
    .swiglu_backward = swiglu_backward,
    .rope_pack_qkv = rope_pack_qkv,
    .rope_pack_qkv_backward = rope_pack_qkv_backward,
    .embedding_forward = embedding_forward,
    .embedding_backward = embedding_backward,
    .moe_gather = moe_gather,
    .moe_combine = moe_combine,
    .moe_combine_weight_grad = moe_combine_weight_grad,
    .position_embedding_forward = position_embedding_forward,
    .position_embedding_backward = position_embedding_backward,
    .cross_entropy_forward = cross_entropy_forward,
    .cross_entropy_backward = cross_entropy_backward,
    .cross_entropy_shard_max = cross_entropy_shard_max,
    .cross_entropy_shard_sum_exp_and_target = cross_entropy_shard_sum_exp_and_target,
    .cross_entropy_loss = cross_entropy_loss,
    .cross_entropy_shard_argmax = cross_entropy_shard_argmax,
    .count_correct = count_correct,
    .conv2d_forward = conv2d_forward,
    .conv2d_backward_input = conv2d_backward_input,
    .conv2d_backward_weight = conv2d_backward_weight,
    .maxpool2d_forward = maxpool2d_forward,
    .maxpool2d_backward = maxpool2d_backward,
    .adamw_update = adamw_update,
    .sgd_update = sgd_update,
    .adamw_update_many = adamw_update_many,
    .sgd_update_many = sgd_update_many,
    .check_device_status = check_device_status,
    .transfer = transfer,
    .synchronize = synchronize,
};

}  // namespace

const Backend& cpu_backend() { return kCpuBackend; }

void configure_cpu_threads(int threads) { kc::configure_kernel_threads(threads); }

int cpu_threads() { return kc::kernel_threads(); }

std::string cpu_blas_description() { return kc::blas_config() + " (core " + kc::blas_core_name() + ")"; }

CpuGemmChoice resolved_cpu_gemm(CpuBlas requested, bool bf16_operands) {
  static const CpuBlasFacts facts = build_cpu_blas_facts(kc::onednn_bf16_instructions());  // fixed per process
  return choose_cpu_gemm(requested, bf16_operands, facts);
}

}  // namespace cleave::ops
