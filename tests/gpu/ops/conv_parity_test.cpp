// Seam parity of convolution (cuDNN) and max pooling (our kernel): ops::conv2d_* and ops::maxpool2d_* on cuda:0
// against the CPU backend (im2col + GEMM; a window scan).
//
// What it asserts, with the tolerance of each (expect_close: |gpu - cpu| <= tol * (|cpu| + max|cpu|)):
//  - conv2d forward, backward_input and backward_weight (+= into random dweight and dbias) on odd sizes
//    (7x7, 9x11, 5x5; kernels 1, 3, 5; stride 1 and 2; padding 0, 1, 2), f32: 1e-4 (cuDNN sums the C*k*k
//    products in another order, FMA; no TF32); bf16 inputs (widened, f32 arithmetic, rounded outputs): 1e-2
//    for bf16 outputs, 1e-4 for the f32 weight gradients;
//  - max pooling forward and backward, f32 and bf16, disjoint (2/2) and overlapping (3/2) windows, inputs
//    drawn from 4 values so ties are everywhere: y, argmax and dx identical (tolerance 0: the first of ties
//    wins on both, dx gathers in the CPU's scatter order).
// Compiled here without a GPU; NOT yet run on one.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "tests/gpu/ops/int_inputs.hpp"
#include "tests/gpu/ops/parity_util.hpp"

namespace cleave::testing::conv_parity_test {
namespace {

struct ConvCase {
  std::int64_t n, c, h, w, c_out, k, stride, padding;
};

class ConvParity : public OpsParity, public ::testing::WithParamInterface<std::tuple<ConvCase, DType>> {};

TEST_P(ConvParity, ForwardAndBackwardMatchTheCpu) {
  const auto [cc, dtype] = GetParam();
  const ops::Conv2dParams params{cc.stride, cc.padding};
  const std::int64_t oh = (cc.h + 2 * cc.padding - cc.k) / cc.stride + 1;
  const std::int64_t ow = (cc.w + 2 * cc.padding - cc.k) / cc.stride + 1;
  const Tensor x = random({cc.n, cc.c, cc.h, cc.w}, dtype);
  const Tensor weight = random({cc.c_out, cc.c, cc.k, cc.k}, dtype);
  const Tensor bias = random({cc.c_out}, dtype);
  const Tensor dy = random({cc.n, cc.c_out, oh, ow}, dtype);
  const double out_tol = dtype == DType::kBF16 ? 1e-2 : 1e-4;

  Tensor y = empty_cpu({cc.n, cc.c_out, oh, ow}, dtype);
  ops::conv2d_forward(cpu(), x, weight, bias, y, params);
  Tensor g_y = poisoned_gpu(y.shape(), dtype);
  const Tensor g_x = to_gpu(x), g_w = to_gpu(weight), g_dy = to_gpu(dy);
  ops::conv2d_forward(gpu(), g_x, g_w, to_gpu(bias), g_y, params);
  expect_close(y, g_y, out_tol, "conv2d_forward");

  Tensor dx = empty_cpu(x.shape(), dtype);
  ops::conv2d_backward_input(cpu(), dy, weight, dx, params);
  Tensor g_dx = poisoned_gpu(x.shape(), dtype);
  ops::conv2d_backward_input(gpu(), g_dy, g_w, g_dx, params);
  expect_close(dx, g_dx, out_tol, "conv2d_backward_input");

  const Tensor dw0 = random(weight.shape(), DType::kF32), db0 = random({cc.c_out}, DType::kF32);
  const Tensor g_dw = to_gpu(dw0), g_db = to_gpu(db0);
  Tensor dw = empty_cpu(weight.shape(), DType::kF32), db = empty_cpu({cc.c_out}, DType::kF32);
  ops::copy(cpu(), dw0, dw);
  ops::copy(cpu(), db0, db);
  ops::conv2d_backward_weight(cpu(), x, dy, dw, db, params);
  ops::conv2d_backward_weight(gpu(), g_x, g_dy, g_dw, g_db, params);
  expect_close(dw, g_dw, 1e-4, "conv2d_backward_weight dweight (+=)");
  expect_close(db, g_db, 1e-4, "conv2d_backward_weight dbias (+=)");
  // Without a bias gradient (the seam allows it).
  ops::conv2d_backward_weight(gpu(), g_x, g_dy, g_dw, Tensor(), params);
  ops::conv2d_backward_weight(cpu(), x, dy, dw, Tensor(), params);
  expect_close(dw, g_dw, 1e-4, "conv2d_backward_weight without dbias");
}

INSTANTIATE_TEST_SUITE_P(Shapes, ConvParity,
                         ::testing::Values(std::make_tuple(ConvCase{2, 3, 7, 7, 5, 3, 1, 1}, DType::kF32),
                                           std::make_tuple(ConvCase{3, 4, 9, 11, 6, 5, 2, 2}, DType::kF32),
                                           std::make_tuple(ConvCase{1, 1, 5, 5, 2, 1, 1, 0}, DType::kF32),
                                           std::make_tuple(ConvCase{4, 16, 8, 8, 32, 3, 1, 1}, DType::kF32),
                                           std::make_tuple(ConvCase{2, 3, 7, 7, 5, 3, 1, 1}, DType::kBF16),
                                           std::make_tuple(ConvCase{3, 4, 9, 11, 6, 5, 2, 2}, DType::kBF16)));

class MaxPoolParity
    : public OpsParity,
      public ::testing::WithParamInterface<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, DType>> {
};

TEST_P(MaxPoolParity, ForwardArgmaxAndBackwardAreIdentical) {
  const auto [h, w, window, stride, dtype] = GetParam();
  const std::int64_t n = 2, c = 3;
  const std::int64_t oh = (h - window) / stride + 1, ow = (w - window) / stride + 1;
  Tensor x = random({n, c, h, w}, DType::kF32, 0.0f, 4.0f);
  for (float& v : x.span<float>()) v = std::floor(v);  // 4 values: ties in most windows
  Tensor xd = empty_cpu(x.shape(), dtype);
  ops::copy(cpu(), x, xd);
  Tensor y = empty_cpu({n, c, oh, ow}, dtype), argmax = empty_cpu({n, c, oh, ow}, DType::kI32);
  ops::maxpool2d_forward(cpu(), xd, y, argmax, window, stride);
  Tensor g_y = poisoned_gpu(y.shape(), dtype), g_arg = poisoned_gpu(argmax.shape(), DType::kI32);
  ops::maxpool2d_forward(gpu(), to_gpu(xd), g_y, g_arg, window, stride);
  expect_close(y, g_y, 0.0, "maxpool2d_forward y");
  expect_equal_ints(argmax, to_cpu(g_arg), "maxpool2d_forward argmax");

  const Tensor dy = random(y.shape(), dtype);
  Tensor dx = empty_cpu(x.shape(), dtype);
  ops::maxpool2d_backward(cpu(), dy, argmax, dx, window, stride);
  Tensor g_dx = poisoned_gpu(x.shape(), dtype);
  ops::maxpool2d_backward(gpu(), to_gpu(dy), g_arg, g_dx, window, stride);
  expect_close(dx, g_dx, 0.0, "maxpool2d_backward dx");
}

INSTANTIATE_TEST_SUITE_P(Shapes, MaxPoolParity,
                         ::testing::Values(std::make_tuple(std::int64_t{7}, std::int64_t{7}, std::int64_t{2},
                                                           std::int64_t{2}, DType::kF32),
                                           std::make_tuple(std::int64_t{9}, std::int64_t{11}, std::int64_t{3},
                                                           std::int64_t{2}, DType::kF32),
                                           std::make_tuple(std::int64_t{8}, std::int64_t{8}, std::int64_t{2},
                                                           std::int64_t{2}, DType::kBF16),
                                           std::make_tuple(std::int64_t{9}, std::int64_t{11}, std::int64_t{3},
                                                           std::int64_t{2}, DType::kBF16)));

}  // namespace
}  // namespace cleave::testing::conv_parity_test
