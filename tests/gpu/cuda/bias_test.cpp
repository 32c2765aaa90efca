// CUDA bias kernels against kernels/cpu/bias on awkward shapes: forward in place (1e-5), backward accumulating
// into a random dbias (+=, 1e-5 against the CPU column sums) through a poisoned workspace, and deterministic
// (a second run from the same starting dbias gives the same bits).
#include "kernels/cuda/bias.hpp"

#include <gtest/gtest.h>

#include <tuple>

#include "kernels/cpu/bias.hpp"
#include "tests/gpu/cuda/cuda_test_util.hpp"

namespace cleave::testing::bias_test {
namespace {

namespace kc = kernels::cuda;

class CudaBias : public CudaTest, public ::testing::WithParamInterface<std::tuple<int64_t, int64_t>> {};

TEST_P(CudaBias, ForwardAndBackwardMatchCpu) {
  const auto [rows, cols] = GetParam();
  const auto y0 = random_floats(static_cast<size_t>(rows * cols));
  const auto bias = random_floats(static_cast<size_t>(cols));
  std::vector<float> want = y0;
  kernels::cpu::bias_add_forward(want.data(), bias.data(), rows, cols);
  Tensor y = upload_f32(y0);
  Tensor dbias_in = upload_f32(bias);
  kc::bias_add_forward(y.data<float>(), dbias_in.data<float>(), rows, cols, stream());
  expect_close(download_f32(y), want, kF32Tolerance, "bias_add_forward");

  const auto dy = random_floats(static_cast<size_t>(rows * cols));
  const auto dbias0 = random_floats(static_cast<size_t>(cols));
  std::vector<float> want_db = dbias0;
  kernels::cpu::bias_backward(dy.data(), want_db.data(), rows, cols);
  Tensor ddy = upload_f32(dy);
  Tensor db = upload_f32(dbias0);
  const std::size_t ws_bytes = kc::bias_backward_workspace_size(rows, cols);
  Tensor ws = workspace(ws_bytes);
  CLEAVE_CUDA_CHECK(cudaMemsetAsync(ws.raw_data(), 0xff, ws.nbytes(), stream()));  // partials must be written
  kc::bias_backward(ddy.data<float>(), db.data<float>(), rows, cols, ws.raw_data(), ws_bytes, stream());
  const auto got = download_f32(db);
  expect_close(got, want_db, kF32Tolerance, "bias_backward");

  Tensor db2 = upload_f32(dbias0);
  kc::bias_backward(ddy.data<float>(), db2.data<float>(), rows, cols, ws.raw_data(), ws_bytes, stream());
  expect_bitwise_equal(download_f32(db2), got, "bias_backward run twice");
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaBias,
                         ::testing::Values(std::make_tuple(int64_t{1}, int64_t{1}),
                                           std::make_tuple(int64_t{3}, int64_t{33}),
                                           std::make_tuple(int64_t{65}, int64_t{31}),
                                           std::make_tuple(int64_t{1000}, int64_t{768}),
                                           std::make_tuple(int64_t{8193}, int64_t{97})));

}  // namespace
}  // namespace cleave::testing::bias_test
