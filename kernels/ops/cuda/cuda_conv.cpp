// The CUDA backend's convolution and max-pooling slots (NCHW; contracts in ops.hpp). Convolution runs through
// cuDNN (kernels/cuda/conv2d: deterministic FMA algorithms, workspace from ctx.allocator as kWorkspace, the
// handle in the device resources) in f32: bf16 tensors are widened into scratch and outputs rounded back, the
// CPU backend's numerics contract. Max pooling is our own kernel (kernels/cuda/maxpool: cuDNN keeps no
// arg-max), f32 or bf16 in place.
#include "kernels/cuda/conv2d.hpp"
#include "kernels/cuda/maxpool.hpp"
#include "kernels/ops/conv2d_shape.hpp"
#include "kernels/ops/cuda/cuda_slots.hpp"

namespace cleave::ops::cuda_detail {
namespace {

kd::Conv2dShape conv_shape(const Tensor& x, const Tensor& weight, const Conv2dParams& params) {
  const auto s = conv2d_shape_of<kd::Conv2dShape>(x, weight, params);
  kd::conv2d_check_shape(s);
  return s;
}

kd::PoolShape pool_shape(const Tensor& x, std::int64_t window, std::int64_t stride) {
  return {x.dim(0), x.dim(1), x.dim(2), x.dim(3), window, stride};
}

}  // namespace

void conv2d_forward(const Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y,
                    const Conv2dParams& params) {
  const kd::Conv2dShape s = conv_shape(x, weight, params);
  CLEAVE_CHECK(y.numel() == s.batch * s.out_channels * s.out_height() * s.out_width(),
               "conv2d_forward: y {} should be [{}, {}, {}, {}]", y.shape().str(), s.batch, s.out_channels,
               s.out_height(), s.out_width());
  kd::ConvContext& conv = conv_context(ctx);
  const std::size_t bytes = kd::conv2d_workspace_size(conv, s, kd::ConvPass::kForward);
  F32In in(ctx, x), w(ctx, weight), b(ctx, bias);
  F32Out out(ctx, y, false);
  Tensor ws = scratch(ctx, bytes);
  kd::conv2d_forward(conv, s, in.get(), w.get(), b.get(), out.get(), ws.raw_data(), bytes, stream_of(ctx));
  out.finish();
}

void conv2d_backward_input(const Context& ctx, const Tensor& dy, const Tensor& weight, const Tensor& dx,
                           const Conv2dParams& params) {
  const kd::Conv2dShape s = conv_shape(dx, weight, params);
  CLEAVE_CHECK(dy.numel() == s.batch * s.out_channels * s.out_height() * s.out_width(),
               "conv2d_backward_input: dy {} should be [{}, {}, {}, {}]", dy.shape().str(), s.batch, s.out_channels,
               s.out_height(), s.out_width());
  kd::ConvContext& conv = conv_context(ctx);
  const std::size_t bytes = kd::conv2d_workspace_size(conv, s, kd::ConvPass::kBackwardInput);
  F32In d(ctx, dy), w(ctx, weight);
  F32Out out(ctx, dx, false);
  Tensor ws = scratch(ctx, bytes);
  kd::conv2d_backward_input(conv, s, d.get(), w.get(), out.get(), ws.raw_data(), bytes, stream_of(ctx));
  out.finish();
}

void conv2d_backward_weight(const Context& ctx, const Tensor& x, const Tensor& dy, const Tensor& dweight,
                            const Tensor& dbias, const Conv2dParams& params) {
  const kd::Conv2dShape s = conv_shape(x, dweight, params);
  CLEAVE_CHECK(dy.numel() == s.batch * s.out_channels * s.out_height() * s.out_width(),
               "conv2d_backward_weight: dy {} should be [{}, {}, {}, {}]", dy.shape().str(), s.batch, s.out_channels,
               s.out_height(), s.out_width());
  kd::ConvContext& conv = conv_context(ctx);
  const std::size_t bytes = kd::conv2d_workspace_size(conv, s, kd::ConvPass::kBackwardWeight);
  F32In in(ctx, x), d(ctx, dy);
  Tensor ws = scratch(ctx, bytes);
  kd::conv2d_backward_weight(conv, s, in.get(), d.get(), dweight.data<float>(),
                             dbias.defined() ? dbias.data<float>() : nullptr, ws.raw_data(), bytes, stream_of(ctx));
}

void maxpool2d_forward(const Context& ctx, const Tensor& x, const Tensor& y, const Tensor& argmax, std::int64_t window,
                       std::int64_t stride) {
  CLEAVE_CHECK(x.dtype() == y.dtype(), "maxpool2d_forward on {}: x is {} but y is {} (one dtype)", ctx.device.str(),
               dtype_name(x.dtype()), dtype_name(y.dtype()));
  const kd::PoolShape s = pool_shape(x, window, stride);
  CLEAVE_CHECK(y.numel() == s.batch * s.channels * s.out_height() * s.out_width(),
               "maxpool2d_forward: y {} should be [{}, {}, {}, {}]", y.shape().str(), s.batch, s.channels,
               s.out_height(), s.out_width());
  kd::maxpool2d_forward(x.raw_data(), y.raw_data(), float_type(x), argmax.data<std::int32_t>(), s, stream_of(ctx));
}

void maxpool2d_backward(const Context& ctx, const Tensor& dy, const Tensor& argmax, const Tensor& dx,
                        std::int64_t window, std::int64_t stride) {
  CLEAVE_CHECK(dy.dtype() == dx.dtype(), "maxpool2d_backward on {}: dy is {} but dx is {} (one dtype)",
               ctx.device.str(), dtype_name(dy.dtype()), dtype_name(dx.dtype()));
  const kd::PoolShape s = pool_shape(dx, window, stride);
  CLEAVE_CHECK(dy.numel() == s.batch * s.channels * s.out_height() * s.out_width(),
               "maxpool2d_backward: dy {} should be [{}, {}, {}, {}]", dy.shape().str(), s.batch, s.channels,
               s.out_height(), s.out_width());
  kd::maxpool2d_backward(dy.raw_data(), dx.raw_data(), float_type(dx), argmax.data<std::int32_t>(), s,
                         stream_of(ctx));
}

}  // namespace cleave::ops::cuda_detail
