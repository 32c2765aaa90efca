// Max pooling against a naive reference: values, argmax (flat index in the plane, first on ties),
// and the backward scatter (dx overwritten; overlapping windows add), on odd shapes.
#include "kernels/cpu/maxpool.hpp"

#include <gtest/gtest.h>

#include <tuple>

#include "kernel_test_util.hpp"

namespace cleave::kernels::cpu::maxpool_test {
namespace {

using PoolShape = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;  // N C H W window stride

class KernelMaxPool : public ::testing::TestWithParam<PoolShape> {};

TEST_P(KernelMaxPool, MatchesReference) {
  const auto [N, C, H, W, win, stride] = GetParam();
  const int64_t OH = (H - win) / stride + 1, OW = (W - win) / stride + 1;
  const auto x = test::random_floats(static_cast<size_t>(N * C * H * W), 110);
  const auto dy = test::random_floats(static_cast<size_t>(N * C * OH * OW), 111);
  auto y = test::poisoned(dy.size());
  std::vector<int32_t> arg(dy.size(), -7);
  maxpool2d_forward(x.data(), y.data(), arg.data(), N, C, H, W, win, stride);
  std::vector<double> want_dx(x.size(), 0.0);
  for (int64_t p = 0; p < N * C; ++p)
    for (int64_t i = 0; i < OH; ++i)
      for (int64_t j = 0; j < OW; ++j) {
        int64_t best = -1;
        for (int64_t di = 0; di < win; ++di)
          for (int64_t dj = 0; dj < win; ++dj) {
            const int64_t idx = (i * stride + di) * W + j * stride + dj;
            if (best < 0 || x[p * H * W + idx] > x[p * H * W + best]) best = idx;
          }
        const size_t o = static_cast<size_t>((p * OH + i) * OW + j);
        ASSERT_EQ(arg[o], best) << "plane " << p << " output " << i << "," << j;
        ASSERT_EQ(y[o], x[p * H * W + best]);
        want_dx[p * H * W + best] += dy[o];
      }
  EXPECT_GT(test::l2_norm(y), 0.0);
  auto dx = test::poisoned(x.size());
  maxpool2d_backward(dy.data(), arg.data(), dx.data(), N, C, H, W, win, stride);
  test::expect_close(dx, want_dx, 1e-6, 1e-6, "dx");
  EXPECT_GT(test::l2_norm(dx), 0.0);
}

INSTANTIATE_TEST_SUITE_P(Kernels, KernelMaxPool,
                         ::testing::Values(PoolShape{2, 3, 7, 9, 2, 2}, PoolShape{1, 1, 5, 5, 3, 2},
                                           PoolShape{2, 2, 4, 4, 4, 1}, PoolShape{3, 5, 13, 11, 3, 1},
                                           PoolShape{1, 1, 1, 1, 1, 1}, PoolShape{4, 16, 28, 28, 2, 2}));

TEST(KernelMaxPoolTies, FirstMaximumWins) {
  const std::vector<float> x = {1.0f, 2.0f, 2.0f, 2.0f};
  float y = 0.0f;
  int32_t arg = -1;
  maxpool2d_forward(x.data(), &y, &arg, 1, 1, 2, 2, 2, 2);
  EXPECT_EQ(y, 2.0f);
  EXPECT_EQ(arg, 1);
}

TEST(KernelMaxPoolTies, WindowLargerThanInputThrows) {
  std::vector<float> x(4), y(4);
  std::vector<int32_t> arg(4);
  EXPECT_THROW(maxpool2d_forward(x.data(), y.data(), arg.data(), 1, 1, 2, 2, 3, 1), Error);
}

}  // namespace
}  // namespace cleave::kernels::cpu::maxpool_test
