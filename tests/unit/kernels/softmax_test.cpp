// Row softmax against a double reference (including huge logits that would overflow a naive exp),
// backward against the analytic double gradient and finite differences of the kernel's forward.
#include "kernels/cpu/softmax.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.hpp"

namespace cleave::kernels::cpu::softmax_test {
namespace {

std::vector<double> softmax_ref(const std::vector<float>& x, int64_t rows, int64_t cols) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mx = x[r * cols];
    for (int64_t c = 1; c < cols; ++c) mx = std::max(mx, double(x[r * cols + c]));
    double s = 0.0;
    for (int64_t c = 0; c < cols; ++c) s += std::exp(x[r * cols + c] - mx);
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = std::exp(x[r * cols + c] - mx) / s;
  }
  return y;
}

TEST(KernelSoftmax, ForwardMatchesReference) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {3, 7}, {13, 65}, {37, 1001}}) {
    auto x = test::random_floats(static_cast<size_t>(rows * cols), 30, 5.0f);
    x[0] += 1000.0f;  // overflow guard: exp(1000) is inf without the max shift
    auto y = test::poisoned(x.size());
    softmax_forward(x.data(), y.data(), rows, cols);
    test::expect_close(y, softmax_ref(x, rows, cols), 1e-7, 2e-6, "softmax");
    EXPECT_GT(test::l2_norm(y), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0.0;
      for (int64_t c = 0; c < cols; ++c) s += y[r * cols + c];
      EXPECT_NEAR(s, 1.0, 1e-5);
    }
  }
}

TEST(KernelSoftmax, BackwardMatchesAnalyticAndFiniteDifferences) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 3}, {7, 13}, {5, 129}}) {
    auto x = test::random_floats(static_cast<size_t>(rows * cols), 31, 2.0f);
    const auto w = test::random_floats(x.size(), 32);
    std::vector<float> y(x.size());
    softmax_forward(x.data(), y.data(), rows, cols);
    auto dx = test::poisoned(x.size());
    softmax_backward(y.data(), w.data(), dx.data(), rows, cols);
    std::vector<double> want(x.size());
    const auto yd = softmax_ref(x, rows, cols);
    for (int64_t r = 0; r < rows; ++r) {
      double dot = 0.0;
      for (int64_t c = 0; c < cols; ++c) dot += yd[r * cols + c] * w[r * cols + c];
      for (int64_t c = 0; c < cols; ++c) want[r * cols + c] = yd[r * cols + c] * (w[r * cols + c] - dot);
    }
    test::expect_close(dx, want, 1e-6, 1e-4, "softmax backward");
    EXPECT_GT(test::l2_norm(dx), 0.0);
    std::vector<float> y_fd(x.size());
    auto loss = [&] {
      softmax_forward(x.data(), y_fd.data(), rows, cols);
      double l = 0.0;
      for (size_t i = 0; i < y_fd.size(); ++i) l += double(w[i]) * y_fd[i];
      return l;
    };
    for (size_t i = 0; i < x.size(); i += 1 + x.size() / 10) {
      const double fd = test::finite_difference(x, i, 1e-2f, loss);
      EXPECT_NEAR(dx[i], fd, 2e-3 * (1.0 + std::fabs(fd))) << "element " << i;
    }
  }
}

}  // namespace
}  // namespace cleave::kernels::cpu::softmax_test
