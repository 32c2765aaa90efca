// Causal multi-head attention against a naive double reference (llm.c layout): out, the saved probs
// (exactly 0 above the diagonal), and every part of dqkv (q, k and v columns), then finite differences of
// the kernel's forward on a sample of qkv elements. Shapes include T = 1 and a case above OpenBLAS's
// single-thread size so both batched-GEMM paths run.
#include "kernels/cpu/attention_probs.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "kernel_test_util.hpp"

namespace cleave::kernels::cpu::attention_test {
namespace {

struct Shape {
  int64_t B, T, H, hd;
};

struct Ref {
  std::vector<double> out, probs, dqkv;
};

Ref reference(const std::vector<float>& qkv, const std::vector<float>& dout, Shape s) {
  const int64_t C = s.H * s.hd, ld = 3 * C;
  const double scale = 1.0 / std::sqrt(double(s.hd));
  Ref r;
  r.out.assign(static_cast<size_t>(s.B * s.T * C), 0.0);
  r.probs.assign(static_cast<size_t>(s.B * s.H * s.T * s.T), 0.0);
  r.dqkv.assign(qkv.size(), 0.0);
  auto at = [&](int64_t b, int64_t t, int64_t part, int64_t h, int64_t d) {
    return (b * s.T + t) * ld + part * C + h * s.hd + d;
  };
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t h = 0; h < s.H; ++h) {
      double* P = &r.probs[((b * s.H + h) * s.T) * s.T];
      for (int64_t t = 0; t < s.T; ++t) {
        double mx = -1e300;
        std::vector<double> sc(static_cast<size_t>(t + 1));
        for (int64_t j = 0; j <= t; ++j) {
          double dot = 0.0;
          for (int64_t d = 0; d < s.hd; ++d) dot += double(qkv[at(b, t, 0, h, d)]) * qkv[at(b, j, 1, h, d)];
          sc[j] = dot * scale;
          mx = std::max(mx, sc[j]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j <= t; ++j) sum += std::exp(sc[j] - mx);
        for (int64_t j = 0; j <= t; ++j) P[t * s.T + j] = std::exp(sc[j] - mx) / sum;
        for (int64_t d = 0; d < s.hd; ++d) {
          double o = 0.0;
          for (int64_t j = 0; j <= t; ++j) o += P[t * s.T + j] * qkv[at(b, j, 2, h, d)];
          r.out[(b * s.T + t) * C + h * s.hd + d] = o;
        }
      }
      // Backward.
      for (int64_t t = 0; t < s.T; ++t) {
        std::vector<double> dp(static_cast<size_t>(t + 1));
        double rowdot = 0.0;
        for (int64_t j = 0; j <= t; ++j) {
          double v = 0.0;
          for (int64_t d = 0; d < s.hd; ++d)
            v += double(dout[(b * s.T + t) * C + h * s.hd + d]) * qkv[at(b, j, 2, h, d)];
          dp[j] = v;
          rowdot += v * P[t * s.T + j];
        }
        for (int64_t j = 0; j <= t; ++j) {
          const double ds = P[t * s.T + j] * (dp[j] - rowdot) * scale;
          for (int64_t d = 0; d < s.hd; ++d) {
            r.dqkv[at(b, t, 0, h, d)] += ds * qkv[at(b, j, 1, h, d)];
            r.dqkv[at(b, j, 1, h, d)] += ds * qkv[at(b, t, 0, h, d)];
            r.dqkv[at(b, j, 2, h, d)] += P[t * s.T + j] * dout[(b * s.T + t) * C + h * s.hd + d];
          }
        }
      }
    }
  }
  return r;
}

class KernelAttention : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, int64_t, int64_t>> {};

TEST_P(KernelAttention, MatchesDoubleReference) {
  const Shape s{std::get<0>(GetParam()), std::get<1>(GetParam()), std::get<2>(GetParam()), std::get<3>(GetParam())};
  const int64_t C = s.H * s.hd;
  auto qkv = test::random_floats(static_cast<size_t>(s.B * s.T * 3 * C), 40, 1.5f);
  const auto dout = test::random_floats(static_cast<size_t>(s.B * s.T * C), 41);
  const Ref ref = reference(qkv, dout, s);

  auto out = test::poisoned(dout.size());
  auto probs = test::poisoned(static_cast<size_t>(s.B * s.H * s.T * s.T));
  attention_probs_forward(qkv.data(), out.data(), probs.data(), s.B, s.T, s.H, s.hd);
  test::expect_close(out, ref.out, 1e-5, 1e-4, "out");
  test::expect_close(probs, ref.probs, 1e-6, 1e-4, "probs");  // includes the exact zeros above the diagonal
  for (int64_t row = 0; row < s.B * s.H * s.T; ++row)
    for (int64_t j = row % s.T + 1; j < s.T; ++j) ASSERT_EQ(probs[row * s.T + j], 0.0f);
  EXPECT_GT(test::l2_norm(out), 0.0);

  auto dqkv = test::poisoned(qkv.size());
  auto workspace = test::poisoned(probs.size());
  attention_probs_backward(dout.data(), qkv.data(), probs.data(), dqkv.data(), workspace.data(), s.B, s.T, s.H, s.hd);
  test::expect_close(dqkv, ref.dqkv, 1e-5, 1e-4, "dqkv");
  EXPECT_GT(test::l2_norm(dqkv), 0.0);

  // Finite differences of L = sum(dout * attention(qkv)) on a sample of q, k and v elements.
  std::vector<float> out_fd(out.size()), probs_fd(probs.size());
  auto loss = [&] {
    attention_probs_forward(qkv.data(), out_fd.data(), probs_fd.data(), s.B, s.T, s.H, s.hd);
    double l = 0.0;
    for (size_t i = 0; i < out_fd.size(); ++i) l += double(dout[i]) * out_fd[i];
    return l;
  };
  for (size_t i = 0; i < qkv.size(); i += 1 + qkv.size() / 24) {
    const double fd = test::finite_difference(qkv, i, 1e-2f, loss);
    EXPECT_NEAR(dqkv[i], fd, 3e-3 * (1.0 + std::fabs(fd))) << "qkv element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, KernelAttention,
                         ::testing::Values(std::make_tuple(1, 1, 1, 1), std::make_tuple(2, 7, 3, 5),
                                           std::make_tuple(1, 13, 2, 16), std::make_tuple(2, 65, 2, 64)));

}  // namespace
}  // namespace cleave::kernels::cpu::attention_test
