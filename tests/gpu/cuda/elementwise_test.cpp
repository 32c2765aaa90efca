// Element-wise CUDA kernels against their CPU twins on fresh random inputs of awkward sizes (1, a partial block,
// more than one grid-stride pass): add, add_inplace, scale_inplace, axpy (f32, 1e-5), sum_squares (double,
// deterministic: two runs give the same bits), and the bf16 casts (bit-exact against cleave::float_to_bf16).
#include "kernels/cuda/elementwise.hpp"

#include <gtest/gtest.h>

#include "kernels/cpu/elementwise.hpp"
#include "tests/gpu/cuda/cuda_test_util.hpp"

namespace cleave::testing::elementwise_test {
namespace {

namespace kc = kernels::cuda;

class CudaElementwise : public CudaTest, public ::testing::WithParamInterface<int64_t> {};

TEST_P(CudaElementwise, MatchesCpu) {
  const int64_t n = GetParam();
  const auto a = random_floats(static_cast<size_t>(n));
  const auto b = random_floats(static_cast<size_t>(n));
  const float alpha = -1.375f;
  Tensor da = upload_f32(a);
  Tensor db = upload_f32(b);

  std::vector<float> want(a.size());
  kernels::cpu::add(a.data(), b.data(), want.data(), n);
  Tensor out = poisoned(n);
  kc::add(da.data<float>(), db.data<float>(), out.data<float>(), n, stream());
  expect_close(download_f32(out), want, kF32Tolerance, "add");

  want = a;
  kernels::cpu::add_inplace(want.data(), b.data(), n);
  Tensor y = upload_f32(a);
  kc::add_inplace(y.data<float>(), db.data<float>(), n, stream());
  expect_close(download_f32(y), want, kF32Tolerance, "add_inplace");

  want = a;
  kernels::cpu::scale_inplace(want.data(), alpha, n);
  y = upload_f32(a);
  kc::scale_inplace(y.data<float>(), alpha, n, stream());
  expect_close(download_f32(y), want, kF32Tolerance, "scale_inplace");

  want = b;
  kernels::cpu::axpy(alpha, a.data(), want.data(), n);
  y = upload_f32(b);
  kc::axpy(alpha, da.data<float>(), y.data<float>(), n, stream());
  expect_close(download_f32(y), want, kF32Tolerance, "axpy");

  const double want_sq = kernels::cpu::sum_squares(a.data(), n);
  Tensor ws = workspace(kc::sum_squares_workspace_size(n));
  Tensor sq = poisoned(2, DType::kI32);  // 8 bytes: one double
  auto* sq_ptr = static_cast<double*>(sq.raw_data());
  kc::sum_squares(da.data<float>(), n, sq_ptr, ws.raw_data(), kc::sum_squares_workspace_size(n), stream());
  const auto first = download<double>(sq);
  EXPECT_NEAR(first[0], want_sq, 1e-12 * want_sq) << "sum_squares";
  EXPECT_GT(first[0], 0.0);
  kc::sum_squares(da.data<float>(), n, sq_ptr, ws.raw_data(), kc::sum_squares_workspace_size(n), stream());
  EXPECT_EQ(download<double>(sq)[0], first[0]) << "sum_squares is not deterministic";
}

TEST_P(CudaElementwise, Bf16CastsAreExact) {
  const int64_t n = GetParam();
  auto x = random_floats(static_cast<size_t>(n), -1000.0f, 1000.0f);
  Tensor dx = upload_f32(x);
  Tensor bf = poisoned(n, DType::kBF16);
  kc::cast_f32_to_bf16(dx.data<float>(), static_cast<__nv_bfloat16*>(bf.raw_data()), n, stream());
  const auto bits = download<std::uint16_t>(bf);
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) wrong += bits[static_cast<size_t>(i)] != float_to_bf16(x[static_cast<size_t>(i)]);
  EXPECT_EQ(wrong, 0) << "f32 -> bf16 differs from cleave::float_to_bf16 (round to nearest even)";
  Tensor back = poisoned(n);
  kc::cast_bf16_to_f32(static_cast<const __nv_bfloat16*>(bf.raw_data()), back.data<float>(), n, stream());
  expect_bitwise_equal(download_f32(back), round_to_bf16(x), "bf16 -> f32");
}

INSTANTIATE_TEST_SUITE_P(Sizes, CudaElementwise, ::testing::Values(1, 7, 255, 257, 100003, 5000011));

}  // namespace
}  // namespace cleave::testing::elementwise_test
