// GELU (tanh approximation) against the double formula, including sizes that hit the vector tail and the
// OpenMP path; backward against the analytic double derivative and against finite differences of the
// kernel's own forward; both against the formula within a relative bound over the whole float range (every 257th
// bit pattern, both signs); special values (zeros, infinities, NaN, saturation); every vector path this CPU has
// (AVX2, AVX-512) gives the baseline path's bits.
#include "kernels/cpu/gelu.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernel_test_util.hpp"
#include "support/isa_paths.hpp"

namespace cleave::kernels::cpu::gelu_test {
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

// The formula with 1 + tanh(u) = 2 s and 1 - tanh(u)^2 = 4 s (1 - s), s = 1 / (1 + e^(-2u)): the same function,
// written so that double keeps its digits where 1 + tanh(u) and 1 - tanh(u)^2 cancel (x below -4 or above 4).
struct GeluParts {
  double y, grad, grad_scale, w;  // grad_scale: the larger of the derivative's two terms; w = 2 u log2(e)
};
GeluParts gelu_parts(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  const double u = k * (x + 0.044715 * x * x * x);
  const double e = std::exp(-2.0 * u);
  const double s = std::isinf(e) ? 0.0 : 1.0 / (1.0 + e);
  const double one_minus_s = std::isinf(e) ? 1.0 : e * s;
  double term = 2.0 * x * k * (1.0 + 3.0 * 0.044715 * x * x) * s * one_minus_s;
  if (!std::isfinite(term)) term = 0.0;  // x s (1 - s) x^2 at |x| where x^2 overflows: the limit, 0
  return {x * s, s + term, std::max(std::fabs(s), std::fabs(term)), std::fabs(2.0 * u / std::log(2.0))};
}

// Every finite float is within 6 * 2^-24 (1 + |w|) of the formula, relative to y (and to the larger term of the
// derivative, which cancels near its zero at x = -0.75), plus 1e-35 where the result is that small. The (1 + |w|)
// is the argument's own rounding: x + 0.044715 x^3 in float is a few 2^-24 off in w, which moves 2^w relatively by
// as much. Measured 3.2 and 2.9 at most (benchmarks/kernels/RESULTS-2026-12-01-v-gelu-tanh.md); the exp form this
// replaced was off by up to 3e-7 absolutely where y is 1e-7 (x near -5).
TEST(KernelGelu, MatchesTheFormulaRelativelyOverTheWholeFloatRange) {
  std::vector<float> x;
  for (uint32_t bits = 0; bits < 0x7F800000u; bits += 257) {
    x.push_back(std::bit_cast<float>(bits));
    x.push_back(-std::bit_cast<float>(bits));
  }
  const auto n = static_cast<int64_t>(x.size());
  std::vector<float> y(x.size()), dx(x.size());
  const std::vector<float> ones(x.size(), 1.0f);
  gelu_forward(x.data(), y.data(), n);
  gelu_backward(x.data(), ones.data(), dx.data(), n);
  constexpr double kUnit = 6.0 * 0x1p-24;
  // The error in units of the bound beyond the 1e-35 floor: 0 within the floor, NaN for a NaN result.
  const auto excess = [](double got, double want, double bound) {
    const double err = std::fabs(got - want);
    return err <= 1e-35 ? 0.0 : (err - 1e-35) / bound;
  };
  double worst_y = 0.0, worst_g = 0.0;
  float at_y = 0.0f, at_g = 0.0f;
  for (size_t i = 0; i < x.size(); ++i) {
    const GeluParts want = gelu_parts(x[i]);
    const double ey = excess(y[i], want.y, kUnit * (1.0 + want.w) * std::fabs(want.y));
    const double eg = excess(dx[i], want.grad, kUnit * (1.0 + want.w) * want.grad_scale);
    if (!(ey <= worst_y)) worst_y = ey, at_y = x[i];  // a NaN error is the worst
    if (!(eg <= worst_g)) worst_g = eg, at_g = x[i];
  }
  EXPECT_LE(worst_y, 1.0) << "forward at x = " << at_y << ", " << x.size() << " values";
  EXPECT_LE(worst_g, 1.0) << "backward at x = " << at_g << ", " << x.size() << " values";
}

TEST(KernelGelu, SpecialValuesAsTheFormula) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> specials = {0.0f, -0.0f, kInf, -kInf, kNan, 1e30f, -1e30f, 1e4f, -1e4f, 30.0f, -30.0f,
                                       1e-30f, -1e-30f, 1e-40f, -1e-40f};
  // Each special in a full vector (position 0 of 16 copies) and in the scalar tail (the 17th).
  for (size_t copies : {size_t{16}, size_t{17}}) {
    for (float v : specials) {
      const std::vector<float> x(copies, v), dy(copies, 3.0f);
      auto y = test::poisoned(copies);
      auto dx = test::poisoned(copies);
      gelu_forward(x.data(), y.data(), static_cast<int64_t>(copies));
      gelu_backward(x.data(), dy.data(), dx.data(), static_cast<int64_t>(copies));
      for (size_t i : {size_t{0}, copies - 1}) {
        const std::string at = "x = " + std::to_string(v) + ", element " + std::to_string(i) + " of " +
                               std::to_string(copies);
        if (std::isnan(v) || v == -kInf) {
          EXPECT_TRUE(std::isnan(y[i])) << at;  // 0.5 (-inf) (1 + tanh(-inf)) = -inf * 0
        } else if (v == 0.0f || std::fabs(v) < 1e-20f) {
          EXPECT_EQ(y[i], 0.5f * v) << at;  // exactly half, the sign of zero kept
          EXPECT_EQ(std::signbit(y[i]), std::signbit(v)) << at;
        } else if (v > 0.0f) {
          EXPECT_EQ(y[i], v) << at;  // saturated: y = x, +inf included
        } else {
          EXPECT_EQ(y[i], 0.0f) << at;
          EXPECT_TRUE(std::signbit(y[i])) << at;  // -0, as x times the formula's 0
        }
        if (std::isnan(v) || std::isinf(v)) {
          EXPECT_TRUE(std::isnan(dx[i])) << at;  // x (1 - tanh^2) du/dx at +-inf: inf * 0
        } else if (std::fabs(v) < 1e-20f) {
          EXPECT_EQ(dx[i], 1.5f) << at;  // dy * 1/2
        } else if (v > 0.0f) {
          EXPECT_EQ(dx[i], 3.0f) << at;  // dy * 1
        } else {
          EXPECT_LE(std::fabs(dx[i]), 1e-34f) << at;  // the value at x = -10, -1.1e-35 * dy
        }
      }
    }
  }
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
    constexpr float kInf = std::numeric_limits<float>::infinity();
    const float specials[] = {-100.0f, -9.0f, -0.0f, 0.0f, 1e-30f, 9.0f, 100.0f,
                              std::numeric_limits<float>::quiet_NaN(), kInf, -kInf, 1e30f, -1e30f, -1e-40f};
    constexpr size_t kSpecials = sizeof specials / sizeof specials[0];
    // Saturation, signed zeros (a -0.0 in a vector tail once came out +0.0), infinities and NaN, at positions that
    // fall in full vectors on one path and in the scalar tail on another.
    if (n >= 9) {
      for (size_t i = 0; i < kSpecials; ++i) x[(i * (x.size() - 1)) / (kSpecials - 1)] = specials[i];
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
}  // namespace cleave::kernels::cpu::gelu_test
