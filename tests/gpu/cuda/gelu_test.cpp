// CUDA GELU against kernels/cpu/gelu on awkward sizes with inputs spanning the saturated tails (-8, 8):
// forward and backward within 1e-5 (relative to each element and the tensor's scale), in place as well.
#include "kernels/cuda/gelu.hpp"

#include <gtest/gtest.h>

#include "kernels/cpu/gelu.hpp"
#include "tests/gpu/cuda/cuda_test_util.hpp"

namespace cleave::testing::gelu_test {
namespace {

namespace kc = kernels::cuda;

class CudaGelu : public CudaTest, public ::testing::WithParamInterface<int64_t> {};

TEST_P(CudaGelu, ForwardAndBackwardMatchCpu) {
  const int64_t n = GetParam();
  const auto x = random_floats(static_cast<size_t>(n), -8.0f, 8.0f);
  const auto dy = random_floats(static_cast<size_t>(n));
  std::vector<float> want_y(x.size()), want_dx(x.size());
  kernels::cpu::gelu_forward(x.data(), want_y.data(), n);
  kernels::cpu::gelu_backward(x.data(), dy.data(), want_dx.data(), n);

  Tensor dxin = upload_f32(x);
  Tensor y = poisoned(n);
  kc::gelu_forward(dxin.data<float>(), y.data<float>(), n, stream());
  expect_close(download_f32(y), want_y, kF32Tolerance, "gelu_forward");

  Tensor ddy = upload_f32(dy);
  Tensor dx = poisoned(n);
  kc::gelu_backward(dxin.data<float>(), ddy.data<float>(), dx.data<float>(), n, stream());
  expect_close(download_f32(dx), want_dx, kF32Tolerance, "gelu_backward");

  kc::gelu_backward(dxin.data<float>(), ddy.data<float>(), ddy.data<float>(), n, stream());  // dx aliases dy
  expect_close(download_f32(ddy), want_dx, kF32Tolerance, "gelu_backward in place");
  kc::gelu_forward(dxin.data<float>(), dxin.data<float>(), n, stream());  // y aliases x
  expect_close(download_f32(dxin), want_y, kF32Tolerance, "gelu_forward in place");
}

INSTANTIATE_TEST_SUITE_P(Sizes, CudaGelu, ::testing::Values(1, 31, 257, 100003));

}  // namespace
}  // namespace cleave::testing::gelu_test
