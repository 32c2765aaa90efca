// GELU (tanh approximation) against the double formula, including sizes that hit the vector tail and the
// OpenMP path; backward against the analytic double derivative and against finite differences of the
// kernel's own forward; every vector path this CPU has (AVX2, AVX-512) gives the baseline path's bits.
#include "kernels/cpu/gelu.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "kernel_test_util.hpp"
#include "support/isa_paths.hpp"

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

TEST(KernelGelu, EveryIsaPathGivesTheSameBits) {
  EXPECT_TRUE(vector_isa_available(VectorIsa::kBaseline));
  EXPECT_TRUE(vector_isa_available(best_vector_isa()));
  double finite_norm = 0.0;  // of the baseline outputs: zeros everywhere cannot pass
  for (int64_t n : {1, 9, 17, 33, 40003}) {
    auto x = test::random_floats(static_cast<size_t>(n), 8, 6.0f);
    const auto dy = test::random_floats(x.size(), 9);
    const float specials[] = {-100.0f, -9.0f, -0.0f, 0.0f, 1e-30f, 9.0f, 100.0f,
                              std::numeric_limits<float>::quiet_NaN()};
    // Saturation, signed zeros (a -0.0 in a vector tail once came out +0.0) and NaN, at positions that fall in
    // full vectors on one path and in the scalar tail on another.
    if (n >= 9) {
      for (size_t i = 0; i < 8; ++i) x[i * (x.size() / 8)] = specials[i];
    }
    std::vector<float> y0(x.size()), dx0(x.size());
    gelu_forward_isa(VectorIsa::kBaseline, x.data(), y0.data(), n);
    gelu_backward_isa(VectorIsa::kBaseline, x.data(), dy.data(), dx0.data(), n);
    for (float v : y0) finite_norm += std::isfinite(v) ? std::fabs(v) : 0.0;
    test::for_each_isa_path(test::kIsaPathsPastBaseline, [&](VectorIsa isa) {
      auto y = test::poisoned(x.size());
      auto dx = test::poisoned(x.size());
      gelu_forward_isa(isa, x.data(), y.data(), n);
      gelu_backward_isa(isa, x.data(), dy.data(), dx.data(), n);
      EXPECT_EQ(std::memcmp(y.data(), y0.data(), y.size() * sizeof(float)), 0)
          << "forward, " << test::isa_label(isa) << ", n " << n;
      EXPECT_EQ(std::memcmp(dx.data(), dx0.data(), dx.size() * sizeof(float)), 0)
          << "backward, " << test::isa_label(isa) << ", n " << n;
    });
  }
  EXPECT_GT(finite_norm, 0.0);
}

}  // namespace
}  // namespace cleave::kernels::cpu
