// GELU (tanh approximation) against the double formula, including sizes that hit the vector tail and the
// OpenMP path; backward against the analytic double derivative and against finite differences of the
// kernel's own forward.
#include "kernels/cpu/gelu.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.hpp"

namespace cleave::kernels::cpu {
namespace {

double gelu_ref(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

double gelu_grad_ref(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  const double u = k * (x + 0.044715 * x * x * x);
  const double t = std::tanh(u);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

TEST(KernelGelu, ForwardMatchesTanhFormula) {
  for (int64_t n : {1, 3, 7, 13, 65, 40003}) {
    const auto x = test::random_floats(static_cast<size_t>(n), 5, 4.0f);
    auto y = test::poisoned(x.size());
    gelu_forward(x.data(), y.data(), n);
    std::vector<double> want(x.size());
    for (size_t i = 0; i < x.size(); ++i) want[i] = gelu_ref(x[i]);
    test::expect_close(y, want, 1e-6, 1e-5, "gelu forward n=" + std::to_string(n));
    EXPECT_GT(test::l2_norm(y), 0.0);
  }
}

TEST(KernelGelu, ForwardSaturatesAndAliases) {
  std::vector<float> x = {-30.0f, -10.0f, 10.0f, 30.0f, 0.5f};
  gelu_forward(x.data(), x.data(), 5);  // in place
  EXPECT_NEAR(x[0], 0.0f, 1e-6f);
  EXPECT_NEAR(x[1], 0.0f, 1e-6f);
  EXPECT_FLOAT_EQ(x[2], 10.0f);
  EXPECT_FLOAT_EQ(x[3], 30.0f);
  EXPECT_NEAR(x[4], gelu_ref(0.5), 1e-6);
}

TEST(KernelGelu, BackwardMatchesAnalyticAndFiniteDifferences) {
  for (int64_t n : {1, 7, 37, 40001}) {
    auto x = test::random_floats(static_cast<size_t>(n), 6, 3.0f);
    const auto dy = test::random_floats(x.size(), 7);
    auto dx = test::poisoned(x.size());
    gelu_backward(x.data(), dy.data(), dx.data(), n);
    std::vector<double> want(x.size());
    for (size_t i = 0; i < x.size(); ++i) want[i] = dy[i] * gelu_grad_ref(x[i]);
    test::expect_close(dx, want, 1e-6, 1e-5, "gelu backward analytic");
    EXPECT_GT(test::l2_norm(dx), 0.0);
    // Finite differences of the float forward on a sample of elements: d/dx_i sum(dy * gelu(x)).
    for (size_t i = 0; i < x.size(); i += 1 + x.size() / 16) {
      float y_one = 0.0f;
      const double fd = test::finite_difference(x, i, 1e-2f, [&] {
        gelu_forward(&x[i], &y_one, 1);
        return static_cast<double>(dy[i]) * y_one;
      });
      EXPECT_NEAR(dx[i], fd, 2e-3 * (1.0 + std::fabs(fd))) << "element " << i;
    }
  }
}

}  // namespace
}  // namespace cleave::kernels::cpu
