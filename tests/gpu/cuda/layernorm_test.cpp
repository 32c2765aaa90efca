// CUDA LayerNorm against kernels/cpu/layernorm on awkward shapes (two columns, fewer columns than a warp, wide
// rows, many rows) with rows that have a large mean (the two-pass variance must not cancel): forward y, mean,
// rstd; backward_input (also in place over dy); backward_weight accumulating into random dgamma/dbeta through
// a poisoned workspace, deterministic across runs. f32 tolerance 1e-5.
#include "kernels/cuda/layernorm.hpp"

#include <gtest/gtest.h>

#include <tuple>

#include "kernels/cpu/layernorm.hpp"
#include "tests/gpu/cuda/cuda_test_util.hpp"

namespace cleave::testing::layernorm_test {
namespace {

namespace kc = kernels::cuda;
constexpr float kEps = 1e-5f;

class CudaLayerNorm : public CudaTest, public ::testing::WithParamInterface<std::tuple<int64_t, int64_t>> {};

TEST_P(CudaLayerNorm, ForwardAndBackwardMatchCpu) {
  const auto [rows, cols] = GetParam();
  const size_t n = static_cast<size_t>(rows * cols);
  auto x = random_floats(n, -2.0f, 2.0f);
  for (int64_t r = 0; r < rows; r += 3) {
    for (int64_t c = 0; c < cols; ++c)
      x[static_cast<size_t>(r * cols + c)] += 8.0f;  // rows whose mean dwarfs their spread
  }
  const auto gamma = random_floats(static_cast<size_t>(cols), 0.5f, 1.5f);
  const auto beta = random_floats(static_cast<size_t>(cols));
  const auto dy = random_floats(n);
  const auto dgamma0 = random_floats(static_cast<size_t>(cols));
  const auto dbeta0 = random_floats(static_cast<size_t>(cols));

  std::vector<float> y(n), mean(static_cast<size_t>(rows)), rstd(static_cast<size_t>(rows)), dx(n);
  std::vector<float> dgamma = dgamma0, dbeta = dbeta0;
  kernels::cpu::layernorm_forward(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), rows, cols,
                                  kEps);
  kernels::cpu::layernorm_backward_input(dy.data(), x.data(), gamma.data(), mean.data(), rstd.data(), dx.data(), rows,
                                         cols);
  kernels::cpu::layernorm_backward_weight(dy.data(), x.data(), mean.data(), rstd.data(), dgamma.data(), dbeta.data(),
                                          rows, cols);

  Tensor d_x = upload_f32(x), d_gamma = upload_f32(gamma), d_beta = upload_f32(beta), d_dy = upload_f32(dy);
  Tensor d_y = poisoned(rows * cols), d_mean = poisoned(rows), d_rstd = poisoned(rows), d_dx = poisoned(rows * cols);
  kc::layernorm_forward(d_x.data<float>(), d_gamma.data<float>(), d_beta.data<float>(), d_y.data<float>(),
                        d_mean.data<float>(), d_rstd.data<float>(), rows, cols, kEps, stream());
  expect_close(download_f32(d_y), y, kF32Tolerance, "layernorm_forward y");
  expect_close(download_f32(d_mean), mean, kF32Tolerance, "layernorm_forward mean");
  expect_close(download_f32(d_rstd), rstd, kF32Tolerance, "layernorm_forward rstd");

  // The backward reads the CPU statistics so that each half is compared on its own.
  Tensor c_mean = upload_f32(mean), c_rstd = upload_f32(rstd);
  kc::layernorm_backward_input(d_dy.data<float>(), d_x.data<float>(), d_gamma.data<float>(), c_mean.data<float>(),
                               c_rstd.data<float>(), d_dx.data<float>(), rows, cols, stream());
  expect_close(download_f32(d_dx), dx, kF32Tolerance, "layernorm_backward_input");

  const std::size_t ws_bytes = kc::layernorm_backward_weight_workspace_size(rows, cols);
  Tensor ws = workspace(ws_bytes);
  CLEAVE_CUDA_CHECK(cudaMemsetAsync(ws.raw_data(), 0xff, ws.nbytes(), stream()));
  Tensor d_dgamma = upload_f32(dgamma0), d_dbeta = upload_f32(dbeta0);
  kc::layernorm_backward_weight(d_dy.data<float>(), d_x.data<float>(), c_mean.data<float>(), c_rstd.data<float>(),
                                d_dgamma.data<float>(), d_dbeta.data<float>(), rows, cols, ws.raw_data(), ws_bytes,
                                stream());
  const auto got_dgamma = download_f32(d_dgamma);
  expect_close(got_dgamma, dgamma, kF32Tolerance, "layernorm_backward_weight dgamma");
  expect_close(download_f32(d_dbeta), dbeta, kF32Tolerance, "layernorm_backward_weight dbeta");
  Tensor again = upload_f32(dgamma0), again_beta = upload_f32(dbeta0);
  kc::layernorm_backward_weight(d_dy.data<float>(), d_x.data<float>(), c_mean.data<float>(), c_rstd.data<float>(),
                                again.data<float>(), again_beta.data<float>(), rows, cols, ws.raw_data(), ws_bytes,
                                stream());
  expect_bitwise_equal(download_f32(again), got_dgamma, "layernorm_backward_weight run twice");

  kc::layernorm_backward_input(d_dy.data<float>(), d_x.data<float>(), d_gamma.data<float>(), c_mean.data<float>(),
                               c_rstd.data<float>(), d_dy.data<float>(), rows, cols, stream());  // dx aliases dy
  expect_close(download_f32(d_dy), dx, kF32Tolerance, "layernorm_backward_input in place");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaLayerNorm,
    ::testing::Values(std::make_tuple(int64_t{1}, int64_t{2}), std::make_tuple(int64_t{5}, int64_t{7}),
                      std::make_tuple(int64_t{9}, int64_t{33}), std::make_tuple(int64_t{64}, int64_t{768}),
                      std::make_tuple(int64_t{3}, int64_t{4099}), std::make_tuple(int64_t{4097}, int64_t{64})));

}  // namespace
}  // namespace cleave::testing::layernorm_test
