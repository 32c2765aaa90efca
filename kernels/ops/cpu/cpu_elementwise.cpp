// The CPU backend's element-wise slots (contracts in ops.hpp; checks in ops_elementwise.cpp): fill and copies,
// add, scale and axpy, the sums of squares behind the gradient norm, bias, GELU, ReLU and softmax.
// Element-wise and row-wise kernels run through run_chunked (cpu_chunked_view.hpp): bf16 tensors are widened and
// narrowed a cache-sized chunk at a time, all-f32 calls run the kernel once. Invariant: every slot gives the bits
// of the f32 kernel on the whole widened tensors, for any thread count; the multi-tensor slots give the bits of
// their single-tensor slot on each tensor in turn.
#include <array>
#include <cstring>
#include <span>

#include "kernels/cpu/bias.hpp"
#include "kernels/cpu/cast.hpp"
#include "kernels/cpu/elementwise.hpp"
#include "kernels/cpu/gelu.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/relu.hpp"
#include "kernels/cpu/softmax.hpp"
#include "kernels/ops/cpu/cpu_resources.hpp"
#include "kernels/ops/cpu/cpu_slots.hpp"
#include "kernels/ops/cpu/scratch_table.hpp"
#include "kernels/ops/cpu_chunked_view.hpp"
#include "kernels/ops/cpu_f32_view.hpp"

namespace cleave::ops::cpu_detail {

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

namespace {

// Row `r` of copy_3d's batches × rows: its first element on each side.
std::int64_t row_at(std::int64_t r, std::int64_t rows, std::int64_t offset, std::int64_t batch_stride,
                    std::int64_t row_stride) {
  return offset + (r / rows) * batch_stride + (r % rows) * row_stride;
}

}  // namespace

// One row at a time: a memcpy in one dtype, else the serial cast of copy's kernel (the same rounding per element).
void copy_3d(const Context& ctx, const Tensor& src, const Tensor& dst, const Copy3d& s) {
  const std::int64_t rows = s.batches * s.rows;
  const auto from = [&](std::int64_t r) {
    return row_at(r, s.rows, s.src_offset, s.src_batch_stride, s.src_row_stride);
  };
  const auto to = [&](std::int64_t r) { return row_at(r, s.rows, s.dst_offset, s.dst_batch_stride, s.dst_row_stride); };
  const bool parallel = rows > 1 && rows * s.cols > (1 << 16);
  if (src.dtype() == dst.dtype()) {
    const std::size_t elem = dtype_size(src.dtype());
    const auto* in = static_cast<const unsigned char*>(src.raw_data());
    auto* out = static_cast<unsigned char*>(dst.raw_data());
    CLEAVE_PARALLEL_FOR(r, rows, parallel,
                        std::memcpy(out + static_cast<std::size_t>(to(r)) * elem,
                                    in + static_cast<std::size_t>(from(r)) * elem,
                                    static_cast<std::size_t>(s.cols) * elem);)
  } else if (dst.dtype() == DType::kBF16) {
    const float* in = src.data<float>();
    std::uint16_t* out = cpu_detail::bf16_data(dst);
    CLEAVE_PARALLEL_FOR(r, rows, parallel, kc::cast_f32_to_bf16_serial(in + from(r), out + to(r), s.cols);)
  } else {
    const std::uint16_t* in = cpu_detail::bf16_data(src);
    float* out = dst.data<float>();
    CLEAVE_PARALLEL_FOR(r, rows, parallel, kc::cast_bf16_to_f32_serial(in + from(r), out + to(r), s.cols);)
  }
  (void)ctx;
}

void add(const Context& ctx, const Tensor& a, const Tensor& b, const Tensor& out) {
  run_chunked<2, 1>(cpu_scratch(ctx), {ChunkIn{&a}, ChunkIn{&b}}, {ChunkOut{&out, false}}, a.numel(), 1,
                    [](const In2& in, const Out1& o, int64_t, int64_t n) { kc::add(in[0], in[1], o[0], n); });
}

void add_inplace(const Context& ctx, const Tensor& y, const Tensor& x) {
  run_chunked<1, 1>(cpu_scratch(ctx), {ChunkIn{&x}}, {ChunkOut{&y, true}}, y.numel(), 1,
                    [](const In1& in, const Out1& o, int64_t, int64_t n) { kc::add_inplace(o[0], in[0], n); });
}

namespace {

void scale_chunked(const Context& ctx, const Tensor& y, float alpha) {
  run_chunked<0, 1>(cpu_scratch(ctx), {}, {ChunkOut{&y, true}}, y.numel(), 1,
                    [alpha](const std::array<const float*, 0>&, const Out1& o, int64_t, int64_t n) {
                      kc::scale_inplace(o[0], alpha, n);
                    });
}

}  // namespace

void scale_inplace(const Context& ctx, const Tensor& y, float alpha) { scale_chunked(ctx, y, alpha); }

// The f32 tensors in one kernel call (one OpenMP team, elementwise.hpp); a bf16 one through scale_inplace's
// chunked widen-scale-narrow, as alone (the tensors do not overlap, so the order between the two groups is free).
// The f32 list lives in the run's scratch, leased after the bf16 tensors are done (scale_chunked leases it too).
void scale_inplace_many(const Context& ctx, std::span<const Tensor> ys, float alpha) {
  std::size_t f32_count = 0;
  for (const Tensor& y : ys) {
    if (y.dtype() == DType::kF32) ++f32_count;
    else scale_chunked(ctx, y, alpha);
  }
  ScratchTable<kc::FloatSpan> f32(ctx, f32_count);
  for (const Tensor& y : ys) {
    if (y.dtype() == DType::kF32) f32.push_back({y.data<float>(), y.numel()});
  }
  kc::scale_inplace_many(f32.data(), f32.size(), alpha);
}

void axpy(const Context& ctx, float alpha, const Tensor& x, const Tensor& y) {
  run_chunked<1, 1>(cpu_scratch(ctx), {ChunkIn{&x}}, {ChunkOut{&y, true}}, y.numel(), 1,
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
  F32Inputs inputs(ctx);
  ScratchTable<kc::ConstFloatSpan> spans(ctx, xs.size());
  for (const Tensor& x : xs) spans.push_back({inputs.view(x), x.numel()});
  kernels::ExactSquareSum total;
  kc::sum_squares_exact_many(spans.data(), spans.size(), total);
  return total;
}

void bias_add_forward(const Context& ctx, const Tensor& y, const Tensor& bias) {
  F32In b(ctx, bias);
  const float* bias_f32 = b.get();
  const int64_t cols = y.shape().last();
  run_chunked<0, 1>(cpu_scratch(ctx), {}, {ChunkOut{&y, true}}, y.shape().rows(), cols,
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

namespace {

template <void (*Kernel)(const float*, float*, int64_t)>
void unary(const Context& ctx, const Tensor& x, const Tensor& y) {
  run_chunked<1, 1>(cpu_scratch(ctx), {ChunkIn{&x}}, {ChunkOut{&y, false}}, x.numel(), 1,
                    [](const In1& in, const Out1& o, int64_t, int64_t n) { Kernel(in[0], o[0], n); });
}

template <void (*Kernel)(const float*, const float*, float*, int64_t)>
void unary_backward(const Context& ctx, const Tensor& x, const Tensor& dy, const Tensor& dx) {
  run_chunked<2, 1>(cpu_scratch(ctx), {ChunkIn{&x}, ChunkIn{&dy}}, {ChunkOut{&dx, false}}, x.numel(), 1,
                    [](const In2& in, const Out1& o, int64_t, int64_t n) { Kernel(in[0], in[1], o[0], n); });
}

}  // namespace

void gelu_forward(const Context& ctx, const Tensor& x, const Tensor& y) { unary<kc::gelu_forward>(ctx, x, y); }
void gelu_backward(const Context& ctx, const Tensor& x, const Tensor& dy, const Tensor& dx) {
  unary_backward<kc::gelu_backward>(ctx, x, dy, dx);
}
void relu_forward(const Context& ctx, const Tensor& x, const Tensor& y) { unary<kc::relu_forward>(ctx, x, y); }
void relu_backward(const Context& ctx, const Tensor& x, const Tensor& dy, const Tensor& dx) {
  unary_backward<kc::relu_backward>(ctx, x, dy, dx);
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

}  // namespace cleave::ops::cpu_detail
