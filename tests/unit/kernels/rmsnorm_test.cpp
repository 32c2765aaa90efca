// RMSNorm kernels against double references on awkward shapes (odd rows, one column, a width past the
// column block); the input gradient is also checked by central finite differences of a double loss, and
// the weight gradient accumulates (+=) onto a non-zero start.
#include "kernels/cpu/rmsnorm.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.hpp"

namespace cleave::kernels::cpu {
namespace {

constexpr float kEps = 1e-5f;

struct RefStats {
  std::vector<double> y, rstd;
};

RefStats reference_forward(const std::vector<float>& x, const std::vector<float>& w, int64_t rows, int64_t cols) {
  RefStats ref{std::vector<double>(x.size()), std::vector<double>(static_cast<size_t>(rows))};
  for (int64_t r = 0; r < rows; ++r) {
    double sq = 0.0;
    for (int64_t c = 0; c < cols; ++c) sq += double(x[r * cols + c]) * x[r * cols + c];
    const double rs = 1.0 / std::sqrt(sq / double(cols) + double(kEps));
    ref.rstd[r] = rs;
    for (int64_t c = 0; c < cols; ++c) ref.y[r * cols + c] = double(x[r * cols + c]) * rs * w[c];
  }
  return ref;
}

TEST(KernelRmsNorm, ForwardMatchesDoubleReference) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {7, 6}, {13, 37}, {33, 300}}) {
    const auto x = test::random_floats(static_cast<size_t>(rows * cols), 1, 2.0f);
    const auto w = test::random_floats(static_cast<size_t>(cols), 2);
    auto y = test::poisoned(x.size());
    auto rstd = test::poisoned(static_cast<size_t>(rows));
    rmsnorm_forward(x.data(), w.data(), y.data(), rstd.data(), rows, cols, kEps);
    const RefStats ref = reference_forward(x, w, rows, cols);
    test::expect_close(y, ref.y, 1e-5, 1e-5, "rmsnorm y");
    test::expect_close(rstd, ref.rstd, 1e-5, 1e-5, "rmsnorm rstd");
    EXPECT_GT(test::l2_norm(y), 0.0);
  }
}

TEST(KernelRmsNorm, BackwardMatchesDoubleReferenceAndAccumulates) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 2}, {9, 6}, {17, 129}}) {
    const auto x = test::random_floats(static_cast<size_t>(rows * cols), 3, 1.5f);
    const auto w = test::random_floats(static_cast<size_t>(cols), 4);
    const auto dy = test::random_floats(x.size(), 5);
    auto y = test::poisoned(x.size());
    auto rstd = test::poisoned(static_cast<size_t>(rows));
    rmsnorm_forward(x.data(), w.data(), y.data(), rstd.data(), rows, cols, kEps);
    const RefStats ref = reference_forward(x, w, rows, cols);

    // Reference: dx_j = r w_j dy_j - x_j r^3 / n sum_c dy_c w_c x_c; dw_c = sum_r dy x r.
    std::vector<double> want_dx(x.size()), want_dw(static_cast<size_t>(cols));
    auto dweight = test::random_floats(static_cast<size_t>(cols), 6);
    for (int64_t c = 0; c < cols; ++c) want_dw[c] = dweight[c];
    for (int64_t r = 0; r < rows; ++r) {
      const double rs = ref.rstd[r];
      double dot = 0.0;
      for (int64_t c = 0; c < cols; ++c) dot += double(dy[r * cols + c]) * w[c] * x[r * cols + c];
      for (int64_t c = 0; c < cols; ++c) {
        const size_t i = static_cast<size_t>(r * cols + c);
        want_dx[i] = rs * w[c] * dy[i] - double(x[i]) * rs * rs * rs / double(cols) * dot;
        want_dw[c] += double(dy[i]) * x[i] * rs;
      }
    }
    auto dx = test::poisoned(x.size());
    rmsnorm_backward_input(dy.data(), x.data(), w.data(), rstd.data(), dx.data(), rows, cols);
    test::expect_close(dx, want_dx, 1e-5, 1e-4, "rmsnorm dx");
    rmsnorm_backward_weight(dy.data(), x.data(), rstd.data(), dweight.data(), rows, cols);
    test::expect_close(dweight, want_dw, 1e-4, 1e-4, "rmsnorm dweight (+= onto the start)");
    EXPECT_GT(test::l2_norm(dx), 0.0);
  }
}

TEST(KernelRmsNorm, InputGradientMatchesFiniteDifferences) {
  const int64_t rows = 3, cols = 7;
  auto x = test::random_floats(static_cast<size_t>(rows * cols), 7);
  const auto w = test::random_floats(static_cast<size_t>(cols), 8);
  const auto dy = test::random_floats(x.size(), 9);
  auto loss = [&] {  // L = sum dy * y, in double
    const RefStats ref = reference_forward(x, w, rows, cols);
    double l = 0.0;
    for (size_t i = 0; i < x.size(); ++i) l += double(dy[i]) * ref.y[i];
    return l;
  };
  std::vector<float> y(x.size()), rstd(static_cast<size_t>(rows)), dx(x.size());
  rmsnorm_forward(x.data(), w.data(), y.data(), rstd.data(), rows, cols, kEps);
  rmsnorm_backward_input(dy.data(), x.data(), w.data(), rstd.data(), dx.data(), rows, cols);
  for (size_t i = 0; i < x.size(); ++i) {
    const double fd = test::finite_difference(x, i, 1e-3f, loss);
    EXPECT_NEAR(dx[i], fd, 2e-3 * (1.0 + std::fabs(fd))) << "element " << i;
  }
}

}  // namespace
}  // namespace cleave::kernels::cpu
