// The internal vectorised exp / tanh (kernels/cpu/vec_math.hpp) against libm in double: relative error of
// exp over its whole range, the documented behaviour outside it (-inf, NaN, overflow), the loop helpers on
// every tail length, sqrt's exactness and tanh's absolute error.
#include "kernels/cpu/vec_math.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernel_test_util.hpp"

namespace cleave::kernels::cpu::detail::vec_math_test {
namespace {

TEST(KernelVecMath, ExpRelativeError) {
  double worst = 0.0;
  for (float x = -87.0f; x <= 88.0f; x += 0.00731f) {
    const double want = std::exp(double(x));
    worst = std::max(worst, std::fabs(exp_scalar(x) - want) / want);
  }
  EXPECT_LT(worst, 3e-7);
  EXPECT_EQ(exp_scalar(0.0f), 1.0f);
}

TEST(KernelVecMath, ExpOutsideRange) {
  EXPECT_LT(exp_scalar(-std::numeric_limits<float>::infinity()), 1e-37f);
  EXPECT_GE(exp_scalar(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_LT(exp_scalar(-1000.0f), 1e-37f);
  EXPECT_TRUE(std::isfinite(exp_scalar(1000.0f)));
  EXPECT_TRUE(std::isnan(exp_scalar(std::numeric_limits<float>::quiet_NaN())));
}

TEST(KernelVecMath, LoopHelpersOnEveryTail) {
  for (int64_t n = 1; n <= 37; ++n) {
    const auto x = test::random_floats(static_cast<size_t>(n), 120 + static_cast<uint64_t>(n), 5.0f);
    double want_sum = 0.0, want_max = x[0];
    for (float v : x) {
      want_sum += std::exp(double(v) - 1.5);
      want_max = std::max(want_max, double(v));
    }
    EXPECT_EQ(max_of(x.data(), n), want_max);
    EXPECT_NEAR(exp_sum(x.data(), 1.5f, n), want_sum, 1e-6 * want_sum);
    auto y = test::poisoned(x.size());
    EXPECT_NEAR(exp_store_sum(x.data(), 1.5f, y.data(), n), want_sum, 1e-6 * want_sum);
    auto z = test::poisoned(x.size());
    exp_scale_store(x.data(), 1.5f, -2.0f, z.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const double e = std::exp(double(x[i]) - 1.5);
      ASSERT_NEAR(y[i], e, 3e-7 * e) << n << " " << i;
      ASSERT_NEAR(z[i], -2.0 * e, 6e-7 * e) << n << " " << i;
    }
  }
}

TEST(KernelVecMath, SqrtIsExact) {
  const auto x = test::random_floats(64, 130, 100.0f);
  for (size_t i = 0; i + kLanes <= x.size(); i += kLanes) {
    f32xN v = load_vec(x.data() + i);
    v = v * v;  // non-negative inputs
    const f32xN r = sqrt_vec(v);
    for (int64_t l = 0; l < kLanes; ++l) ASSERT_EQ(r[l], std::sqrt(v[l]));
  }
  EXPECT_TRUE(std::isnan(sqrt_vec(splat(-1.0f))[0]));
}

TEST(KernelVecMath, TanhAbsoluteError) {
  double worst = 0.0;
  for (float x = -12.0f; x <= 12.0f; x += 0.00193f)
    worst = std::max(worst, std::fabs(tanh_scalar(x) - std::tanh(double(x))));
  EXPECT_LT(worst, 3e-7);
  EXPECT_EQ(tanh_scalar(100.0f), 1.0f);
  EXPECT_EQ(tanh_scalar(-100.0f), -1.0f);
}

}  // namespace
}  // namespace cleave::kernels::cpu::detail::vec_math_test
