// bias_add_forward / bias_backward against double references on odd shapes; backward accumulates (+=),
// so two calls give the initial value plus twice the column sums; a wide case exercises column blocking.
#include "kernels/cpu/bias.hpp"

#include <gtest/gtest.h>

#include "kernel_test_util.hpp"

namespace cleave::kernels::cpu {
namespace {

TEST(KernelBias, ForwardAddsBiasToEveryRow) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {7, 13}, {65, 37}, {300, 257}}) {
    auto y = test::random_floats(static_cast<size_t>(rows * cols), 1);
    const auto bias = test::random_floats(static_cast<size_t>(cols), 2);
    std::vector<double> want(y.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) want[r * cols + c] = double(y[r * cols + c]) + bias[c];
    bias_add_forward(y.data(), bias.data(), rows, cols);
    test::expect_close(y, want, 1e-6, 1e-6, "bias forward");
    EXPECT_GT(test::l2_norm(y), 0.0);
  }
}

TEST(KernelBias, BackwardAccumulatesColumnSums) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {13, 7}, {37, 65}, {129, 600}}) {
    const auto dy = test::random_floats(static_cast<size_t>(rows * cols), 3);
    auto dbias = test::random_floats(static_cast<size_t>(cols), 4);
    const auto initial = dbias;
    std::vector<double> want(static_cast<size_t>(cols));
    for (int64_t c = 0; c < cols; ++c) {
      double s = 0.0;
      for (int64_t r = 0; r < rows; ++r) s += dy[r * cols + c];
      want[c] = initial[c] + 2.0 * s;
    }
    bias_backward(dy.data(), dbias.data(), rows, cols);
    bias_backward(dy.data(), dbias.data(), rows, cols);
    test::expect_close(dbias, want, 1e-4, 1e-5, "bias backward twice");
    EXPECT_GT(test::l2_norm(dbias), 0.0);
  }
}

}  // namespace
}  // namespace cleave::kernels::cpu
