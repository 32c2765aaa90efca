// ReLU forward / backward against references on odd sizes (inputs are never exactly 0, so the convention
// at 0 is tested separately).
#include "kernels/cpu/relu.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.hpp"

namespace cleave::kernels::cpu::relu_test {
namespace {

TEST(KernelRelu, ForwardAndBackward) {
  for (int64_t n : {1, 7, 13, 65, 40007, 300007}) {
    auto x = test::random_floats(static_cast<size_t>(n), 8);
    x[0] = std::fabs(x[0]);  // at least one positive input, so the norm guards below are meaningful
    const auto dy = test::random_floats(x.size(), 9);
    auto y = test::poisoned(x.size());
    auto dx = test::poisoned(x.size());
    relu_forward(x.data(), y.data(), n);
    relu_backward(x.data(), dy.data(), dx.data(), n);
    std::vector<double> want_y(x.size()), want_dx(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      want_y[i] = x[i] > 0 ? x[i] : 0.0;
      want_dx[i] = x[i] > 0 ? dy[i] : 0.0;
    }
    test::expect_close(y, want_y, 0.0, 0.0, "relu forward");
    test::expect_close(dx, want_dx, 0.0, 0.0, "relu backward");
    EXPECT_GT(test::l2_norm(y), 0.0);
    EXPECT_GT(test::l2_norm(dx), 0.0);
  }
}

TEST(KernelRelu, GradientAtZeroIsZero) {
  const float x = 0.0f, dy = 3.0f;
  float dx = -1.0f;
  relu_backward(&x, &dy, &dx, 1);
  EXPECT_EQ(dx, 0.0f);
}

}  // namespace
}  // namespace cleave::kernels::cpu::relu_test
