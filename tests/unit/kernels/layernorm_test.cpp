// LayerNorm against a double reference (y, mean, rstd), backward_input against the analytic double
// gradient and finite differences of the kernel's forward, backward_weight against the reference and
// finite differences in gamma/beta, and its += semantics.
#include "kernels/cpu/layernorm.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.hpp"

namespace cleave::kernels::cpu {
namespace {

constexpr float kEps = 1e-5f;

struct Ref {
  std::vector<double> y, mean, rstd, dx, dgamma, dbeta;
};

Ref reference(const std::vector<float>& x, const std::vector<float>& gamma, const std::vector<float>& beta,
              const std::vector<float>& dy, int64_t rows, int64_t cols) {
  Ref r;
  r.y.resize(x.size());
  r.dx.resize(x.size());
  r.dgamma.assign(static_cast<size_t>(cols), 0.0);
  r.dbeta.assign(static_cast<size_t>(cols), 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    const float* xr = &x[i * cols];
    double mean = 0.0, var = 0.0;
    for (int64_t c = 0; c < cols; ++c) mean += xr[c];
    mean /= cols;
    for (int64_t c = 0; c < cols; ++c) var += (xr[c] - mean) * (xr[c] - mean);
    var /= cols;
    const double rstd = 1.0 / std::sqrt(var + kEps);
    r.mean.push_back(mean);
    r.rstd.push_back(rstd);
    double mean_g = 0.0, mean_gx = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      const double xhat = (xr[c] - mean) * rstd;
      const double g = double(dy[i * cols + c]) * gamma[c];
      r.y[i * cols + c] = xhat * gamma[c] + beta[c];
      mean_g += g / cols;
      mean_gx += g * xhat / cols;
      r.dgamma[c] += dy[i * cols + c] * xhat;
      r.dbeta[c] += dy[i * cols + c];
    }
    for (int64_t c = 0; c < cols; ++c) {
      const double xhat = (xr[c] - mean) * rstd;
      r.dx[i * cols + c] = rstd * (double(dy[i * cols + c]) * gamma[c] - mean_g - xhat * mean_gx);
    }
  }
  return r;
}

class KernelLayerNorm : public ::testing::TestWithParam<std::pair<int64_t, int64_t>> {};

TEST_P(KernelLayerNorm, ForwardBackwardMatchReference) {
  const auto [rows, cols] = GetParam();
  auto x = test::random_floats(static_cast<size_t>(rows * cols), 20, 2.0f);
  for (auto& v : x) v += 0.5f;  // a non-zero mean
  auto gamma = test::random_floats(static_cast<size_t>(cols), 21);
  auto beta = test::random_floats(static_cast<size_t>(cols), 22);
  const auto dy = test::random_floats(x.size(), 23);
  const Ref ref = reference(x, gamma, beta, dy, rows, cols);

  auto y = test::poisoned(x.size());
  auto mean = test::poisoned(static_cast<size_t>(rows));
  auto rstd = test::poisoned(static_cast<size_t>(rows));
  layernorm_forward(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), rows, cols, kEps);
  test::expect_close(y, ref.y, 1e-5, 1e-5, "y");
  test::expect_close(mean, ref.mean, 1e-6, 1e-5, "mean");
  test::expect_close(rstd, ref.rstd, 1e-6, 1e-5, "rstd");
  EXPECT_GT(test::l2_norm(y), 0.0);

  auto dx = test::poisoned(x.size());
  layernorm_backward_input(dy.data(), x.data(), gamma.data(), mean.data(), rstd.data(), dx.data(), rows, cols);
  test::expect_close(dx, ref.dx, 1e-4, 1e-4, "dx");
  EXPECT_GT(test::l2_norm(dx), 0.0);

  auto dgamma = test::random_floats(static_cast<size_t>(cols), 24);
  auto dbeta = test::random_floats(static_cast<size_t>(cols), 25);
  std::vector<double> want_dgamma(dgamma.size()), want_dbeta(dbeta.size());
  for (size_t c = 0; c < dgamma.size(); ++c) {
    want_dgamma[c] = dgamma[c] + 2.0 * ref.dgamma[c];
    want_dbeta[c] = dbeta[c] + 2.0 * ref.dbeta[c];
  }
  for (int call = 0; call < 2; ++call) {
    layernorm_backward_weight(dy.data(), x.data(), mean.data(), rstd.data(), dgamma.data(), dbeta.data(), rows, cols);
  }
  test::expect_close(dgamma, want_dgamma, 1e-4, 1e-4, "dgamma accumulated twice");
  test::expect_close(dbeta, want_dbeta, 1e-4, 1e-4, "dbeta accumulated twice");

  // Finite differences of L = sum(dy * layernorm(x)) in x, gamma and beta (a sample of elements).
  std::vector<float> y_fd(x.size()), m_fd(static_cast<size_t>(rows)), r_fd(static_cast<size_t>(rows));
  auto loss = [&] {
    layernorm_forward(x.data(), gamma.data(), beta.data(), y_fd.data(), m_fd.data(), r_fd.data(), rows, cols, kEps);
    double l = 0.0;
    for (size_t i = 0; i < y_fd.size(); ++i) l += double(dy[i]) * y_fd[i];
    return l;
  };
  for (size_t i = 0; i < x.size(); i += 1 + x.size() / 12) {
    const double fd = test::finite_difference(x, i, 1e-2f, loss);
    EXPECT_NEAR(dx[i], fd, 3e-3 * (1.0 + std::fabs(fd))) << "dx element " << i;
  }
  for (size_t c = 0; c < gamma.size(); c += 1 + gamma.size() / 6) {
    EXPECT_NEAR(ref.dgamma[c], test::finite_difference(gamma, c, 1e-2f, loss), 3e-3 * (1.0 + std::fabs(ref.dgamma[c])));
    EXPECT_NEAR(ref.dbeta[c], test::finite_difference(beta, c, 1e-2f, loss), 3e-3 * (1.0 + std::fabs(ref.dbeta[c])));
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, KernelLayerNorm,
                         ::testing::Values(std::pair<int64_t, int64_t>{1, 3}, std::pair<int64_t, int64_t>{7, 13},
                                           std::pair<int64_t, int64_t>{65, 37}, std::pair<int64_t, int64_t>{45, 769}));

}  // namespace
}  // namespace cleave::kernels::cpu
