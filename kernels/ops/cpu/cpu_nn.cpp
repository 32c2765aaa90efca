// The CPU backend's LayerNorm, embedding, convolution and pooling slots (contracts in ops.hpp; checks in
// ops_nn.cpp). LayerNorm runs row-wise through run_chunked (cpu_chunked_view.hpp); its weight gradient reads
// all-bf16 dy and x a row segment at a time; the embeddings, convolution and pooling use whole-tensor f32 views
// (cpu_f32_view.hpp). Invariant: each gives the bits of its f32 kernel on the widened tensors; the convolution's
// im2col workspace comes from ctx.allocator (kWorkspace) and is returned before the slot returns.
#include <cstdint>

#include "kernels/cpu/conv2d.hpp"
#include "kernels/cpu/embedding.hpp"
#include "kernels/cpu/layernorm.hpp"
#include "kernels/cpu/maxpool.hpp"
#include "kernels/ops/conv2d_shape.hpp"
#include "kernels/ops/cpu/cpu_resources.hpp"
#include "kernels/ops/cpu/cpu_slots.hpp"
#include "kernels/ops/cpu_chunked_view.hpp"
#include "kernels/ops/cpu_f32_view.hpp"

namespace cleave::ops::cpu_detail {

void layernorm_forward(const Context& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd, float eps) {
  F32In g(ctx, gamma), b(ctx, beta);
  const float *gf = g.get(), *bf = b.get();
  float *mf = mean.data<float>(), *rf = rstd.data<float>();
  const int64_t cols = x.shape().last();
  run_chunked<1, 1>(cpu_scratch(ctx), {ChunkIn{&x}}, {ChunkOut{&y, false}}, x.shape().rows(), cols,
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
  run_chunked<2, 1>(cpu_scratch(ctx), {ChunkIn{&dy}, ChunkIn{&x}}, {ChunkOut{&dx, false}}, x.shape().rows(), cols,
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

void position_embedding_forward(const Context& ctx, const Tensor& x, const Tensor& pos) {
  F32In p(ctx, pos);
  F32Out out(ctx, x, true);
  kc::position_embedding_forward(out.get(), p.get(), x.dim(0), x.dim(1), x.dim(2));
}

void position_embedding_backward(const Context& ctx, const Tensor& dx, const Tensor& dpos) {
  F32In d(ctx, dx);
  kc::position_embedding_backward(d.get(), dpos.data<float>(), dx.dim(0), dx.dim(1), dx.dim(2));
}

namespace {

kc::Conv2dShape conv_shape(const Tensor& x, const Tensor& weight, const Conv2dParams& params) {
  const auto s = conv2d_shape_of<kc::Conv2dShape>(x, weight, params);
  kc::conv2d_check_shape(s);
  return s;
}

Tensor conv_workspace(const Context& ctx, const kc::Conv2dShape& s) {
  return Tensor::empty(Shape{kc::conv2d_workspace_floats(s)}, DType::kF32, MemoryCategory::kWorkspace,
                       *ctx.allocator);
}

}  // namespace

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

}  // namespace cleave::ops::cpu_detail
