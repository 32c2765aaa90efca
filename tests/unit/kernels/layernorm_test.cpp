// LayerNorm against a double reference (y, mean, rstd), backward_input against the analytic double
// gradient and finite differences of the kernel's forward, backward_weight against the reference and
// finite differences in gamma/beta, and its += semantics; the forward's and input gradient's instruction-set paths
// and thread counts against the bits of a serial loop that sums each row in 16 lanes (operands over 41 binades); the
// weight gradient's instruction-set paths and thread counts against the bits of the serial loop that sums each column
// in row order (f32 and bf16 operands, bf16 dy over 24 binades so that its sums round).
#include "kernels/cpu/layernorm.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "kernel_test_util.hpp"
#include "kernels/cpu/parallel.hpp"
#include "support/isa_paths.hpp"

namespace cleave::kernels::cpu::layernorm_test {
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

// The bits the forward and input-gradient rows are defined by (layernorm.cpp): each row sum as 16 lane sums from +0,
// element c added to lane c mod 16 in column order, the lanes reduced by lane i += lane i + w for w = 8, 4, 2, 1; the
// element-wise expressions in the kernel's order, without contraction.
__attribute__((optimize("fp-contract=off"))) float lane_order_sum(const std::vector<float>& terms) {
  float lane[16] = {};
  for (size_t c = 0; c < terms.size(); ++c) lane[c % 16] += terms[c];
  for (int w = 8; w >= 1; w /= 2) {
    for (int i = 0; i < w; ++i) lane[i] += lane[i + w];
  }
  return lane[0];
}

struct RowOutputs {
  std::vector<float> y, mean, rstd, dx;
};

__attribute__((optimize("fp-contract=off"))) RowOutputs lane_order_rows(const std::vector<float>& x,
                                                                        const std::vector<float>& gamma,
                                                                        const std::vector<float>& beta,
                                                                        const std::vector<float>& dy, int64_t rows,
                                                                        int64_t cols) {
  RowOutputs o{std::vector<float>(x.size()), {}, {}, std::vector<float>(x.size())};
  const auto n = static_cast<size_t>(cols);
  std::vector<float> t(n), u(n);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = &x[static_cast<size_t>(r * cols)];
    const float* dyr = &dy[static_cast<size_t>(r * cols)];
    for (size_t c = 0; c < n; ++c) t[c] = xr[c];
    const float mu = lane_order_sum(t) / static_cast<float>(cols);
    for (size_t c = 0; c < n; ++c) t[c] = (xr[c] - mu) * (xr[c] - mu);
    const float rs = 1.0f / std::sqrt(lane_order_sum(t) / static_cast<float>(cols) + kEps);
    for (size_t c = 0; c < n; ++c) o.y[r * cols + c] = (xr[c] - mu) * rs * gamma[c] + beta[c];
    for (size_t c = 0; c < n; ++c) {
      t[c] = dyr[c] * gamma[c];
      u[c] = t[c] * (xr[c] - mu) * rs;
    }
    const float mean_g = lane_order_sum(t) / static_cast<float>(cols);
    const float mean_gx = lane_order_sum(u) / static_cast<float>(cols);
    for (size_t c = 0; c < n; ++c) {
      const float xhat = (xr[c] - mu) * rs;
      o.dx[r * cols + c] = rs * (dyr[c] * gamma[c] - mean_g - xhat * mean_gx);
    }
    o.mean.push_back(mu);
    o.rstd.push_back(rs);
  }
  return o;
}

// Equal bits, or both NaN (which NaN a sum returns is outside the same-bits contract: docs/ops.md).
void expect_same_bits_or_both_nan(const std::vector<float>& got, const std::vector<float>& want,
                                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool both_nan = std::isnan(got[i]) && std::isnan(want[i]);
    if (!both_nan && std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && ++wrong <= 3) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", the lane-order loop's " << want[i];
    }
  }
  EXPECT_EQ(wrong, 0u) << what;
}

// Widths below, at and past 16 (the lane sums) and the vectors' widths, a shape large enough to share its rows over
// the team; operands over 41 binades (so that a change in the order of a row's additions rounds differently); an
// infinity in dy and a NaN in x in rows that are a full vector on one path and a tail on another. Every path at 1, 2
// and 3 threads gives the lane-order loop's bits (NaN for NaN).
TEST(KernelLayerNorm, EveryIsaPathAndThreadCountGivesTheSameBits) {
  EXPECT_TRUE(vector_isa_available(VectorIsa::kBaseline));
  double norm = 0.0;  // of the finite dx, so that all-zero gradients cannot pass
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {2, 6}, {3, 15}, {3, 16}, {5, 17}, {9, 31}, {17, 64},
                            {4, 129}, {33, 256}, {400, 260}}) {
    const auto size = static_cast<size_t>(rows * cols);
    auto x = test::random_floats_spanning_binades(size, 71, 41, 0x1p21f);
    for (auto& v : x) v += 0x1p-3f;  // a non-zero mean
    const auto gamma = test::random_floats_spanning_binades(static_cast<size_t>(cols), 72, 41, 0x1p21f);
    const auto beta = test::random_floats_spanning_binades(static_cast<size_t>(cols), 73, 41, 0x1p21f);
    auto dy = test::random_floats_spanning_binades(size, 74, 41, 0x1p21f);
    if (rows >= 3) {
      dy[static_cast<size_t>(cols + cols - 1)] = std::numeric_limits<float>::infinity();
      x[static_cast<size_t>(2 * cols)] = std::numeric_limits<float>::quiet_NaN();
    }
    const RowOutputs want = lane_order_rows(x, gamma, beta, dy, rows, cols);
    for (float v : want.dx) norm += std::isfinite(v) ? std::fabs(v) : 0.0;
    test::for_each_isa_path_and_threads([&](VectorIsa isa, int threads) {
      const std::string what = test::isa_label(isa) + ", " + std::to_string(threads) + " threads, rows " +
                               std::to_string(rows) + ", cols " + std::to_string(cols);
      auto y = test::poisoned(size), dx = test::poisoned(size);
      auto mean = test::poisoned(static_cast<size_t>(rows)), rstd = test::poisoned(static_cast<size_t>(rows));
      layernorm_forward_isa(isa, x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), rows, cols,
                            kEps);
      layernorm_backward_input_isa(isa, dy.data(), x.data(), gamma.data(), mean.data(), rstd.data(), dx.data(), rows,
                                   cols);
      expect_same_bits_or_both_nan(y, want.y, "y, " + what);
      expect_same_bits_or_both_nan(mean, want.mean, "mean, " + what);
      expect_same_bits_or_both_nan(rstd, want.rstd, "rstd, " + what);
      expect_same_bits_or_both_nan(dx, want.dx, "dx, " + what);
    });
  }
  EXPECT_GT(norm, 0.0);
}

// The serial loop the weight gradient's bits are defined by: column c's terms g * (x - mean) * rstd and g added in row
// order from +0, then added to dgamma and dbeta.
__attribute__((optimize("fp-contract=off"))) void row_order_weight_sums(const std::vector<float>& dy,
                                                                         const std::vector<float>& x,
                                                                         const std::vector<float>& mean,
                                                                         const std::vector<float>& rstd,
                                                                         std::vector<float>& dgamma,
                                                                         std::vector<float>& dbeta, int64_t rows,
                                                                         int64_t cols) {
  for (int64_t c = 0; c < cols; ++c) {
    float acc_gamma = 0.0f;
    float acc_beta = 0.0f;
    for (int64_t r = 0; r < rows; ++r) {
      const float g = dy[r * cols + c];
      acc_gamma += g * (x[r * cols + c] - mean[r]) * rstd[r];
      acc_beta += g;
    }
    dgamma[c] += acc_gamma;
    dbeta[c] += acc_beta;
  }
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Widths below, at and past the 64-column block, row counts that run serially and in parallel, an infinity and a
// NaN in dy; bf16 operands widened as loaded give the f32 loop's bits over the widened tensors.
TEST(KernelLayerNormWeight, PathsAndThreadCountsGiveTheRowOrderBits) {
  EXPECT_TRUE(vector_isa_available(VectorIsa::kBaseline));
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {3, 13}, {9, 63}, {17, 64}, {5, 65}, {300, 127},
                            {130, 256}, {520, 257}, {40, 1000}}) {
    auto dy = test::random_floats(static_cast<size_t>(rows * cols), 41, 2.0f);
    if (rows >= 3) {
      dy[static_cast<size_t>(cols + cols - 1)] = std::numeric_limits<float>::infinity();
      dy[static_cast<size_t>(2 * cols)] = std::numeric_limits<float>::quiet_NaN();
    }
    const auto x = test::random_floats(dy.size(), 42, 3.0f);
    const auto mean = test::random_floats(static_cast<size_t>(rows), 43);
    auto rstd = test::random_floats(static_cast<size_t>(rows), 44);
    for (float& v : rstd) v = 1.0f + std::fabs(v);
    // bf16 dy over 24 binades, so that dbeta's sums of bf16 values round (of one binade they add exactly, and no
    // order of the rows could be told from another: checked by reversing the kernel's row loop for bf16 operands).
    const auto dy16 = test::random_bf16_spanning_binades(dy.size(), 45, 24, 2.0f);
    const auto x16 = test::random_bf16(dy.size(), 46, 3.0f);
    const auto gamma0 = test::random_floats(static_cast<size_t>(cols), 47);
    const auto beta0 = test::random_floats(static_cast<size_t>(cols), 48);
    auto want_gamma = gamma0, want_beta = beta0;
    row_order_weight_sums(dy, x, mean, rstd, want_gamma, want_beta, rows, cols);
    auto want_gamma16 = gamma0, want_beta16 = beta0;
    row_order_weight_sums(test::widened(dy16), test::widened(x16), mean, rstd, want_gamma16, want_beta16, rows, cols);
    EXPECT_GT(test::l2_norm(want_gamma16), 0.0);
    test::for_each_isa_path_and_threads([&](VectorIsa isa, int threads) {
      const std::string what = test::isa_label(isa) + ", " + std::to_string(threads) + " threads, rows " +
                               std::to_string(rows) + ", cols " + std::to_string(cols);
      auto gamma = gamma0, beta = beta0, gamma16 = gamma0, beta16 = beta0;
      layernorm_backward_weight_isa(isa, dy.data(), x.data(), mean.data(), rstd.data(), gamma.data(), beta.data(),
                                    rows, cols);
      layernorm_backward_weight_isa(isa, dy16.data(), x16.data(), mean.data(), rstd.data(), gamma16.data(),
                                    beta16.data(), rows, cols);
      EXPECT_TRUE(same_bits(gamma, want_gamma)) << "dgamma, " << what;
      EXPECT_TRUE(same_bits(beta, want_beta)) << "dbeta, " << what;
      EXPECT_TRUE(same_bits(gamma16, want_gamma16)) << "bf16 dgamma, " << what;
      EXPECT_TRUE(same_bits(beta16, want_beta16)) << "bf16 dbeta, " << what;
    });
  }
}


// Operands over 41 binades (2^-20 to 2^20, either sign): values of one binade would mostly add exactly, and then no
// change in the order of the additions could be told apart.
std::vector<float> many_binades(size_t n, uint64_t seed) {
  return test::random_floats_spanning_binades(n, seed, 41, 0x1p21f);
}

// Gradients large enough that their column blocks are shared over the team (detail::worth_parallel_columns), a width
// with a narrower last block, operands over many binades, an infinity and a NaN in dy: the bits of the row-order loop
// on every path at 1, 2 and 3 threads, f32 and bf16 operands.
TEST(KernelLayerNormWeight, TeamSharedBlocksGiveTheRowOrderBitsOverManyBinades) {
  const int64_t rows = 1030, cols = 520;
  ASSERT_TRUE(detail::worth_parallel_columns(4 * rows * cols)) << "the shape would not use the team";
  auto dy = many_binades(static_cast<size_t>(rows * cols), 51);
  dy[static_cast<size_t>(5 * cols + 3)] = std::numeric_limits<float>::infinity();
  dy[static_cast<size_t>(7 * cols + cols - 1)] = std::numeric_limits<float>::quiet_NaN();
  const auto x = many_binades(dy.size(), 52);
  const auto mean = many_binades(static_cast<size_t>(rows), 53);
  auto rstd = many_binades(static_cast<size_t>(rows), 54);
  for (float& v : rstd) v = std::fabs(v);
  const auto dy16 = test::narrowed(many_binades(dy.size(), 55));
  const auto x16 = test::narrowed(many_binades(dy.size(), 56));
  const auto gamma0 = many_binades(static_cast<size_t>(cols), 57);
  const auto beta0 = many_binades(static_cast<size_t>(cols), 58);
  auto want_gamma = gamma0, want_beta = beta0;
  row_order_weight_sums(dy, x, mean, rstd, want_gamma, want_beta, rows, cols);
  auto want_gamma16 = gamma0, want_beta16 = beta0;
  row_order_weight_sums(test::widened(dy16), test::widened(x16), mean, rstd, want_gamma16, want_beta16, rows, cols);
  EXPECT_TRUE(std::isinf(want_beta[3]) && std::isnan(want_beta[static_cast<size_t>(cols - 1)]));
  EXPECT_GT(test::l2_norm(want_gamma16), 0.0);
  test::for_each_isa_path_and_threads([&](VectorIsa isa, int threads) {
    const std::string what = test::isa_label(isa) + ", " + std::to_string(threads) + " threads";
    auto gamma = gamma0, beta = beta0, gamma16 = gamma0, beta16 = beta0;
    layernorm_backward_weight_isa(isa, dy.data(), x.data(), mean.data(), rstd.data(), gamma.data(), beta.data(),
                                  rows, cols);
    layernorm_backward_weight_isa(isa, dy16.data(), x16.data(), mean.data(), rstd.data(), gamma16.data(),
                                  beta16.data(), rows, cols);
    EXPECT_TRUE(same_bits(gamma, want_gamma)) << "dgamma, " << what;
    EXPECT_TRUE(same_bits(beta, want_beta)) << "dbeta, " << what;
    EXPECT_TRUE(same_bits(gamma16, want_gamma16)) << "bf16 dgamma, " << what;
    EXPECT_TRUE(same_bits(beta16, want_beta16)) << "bf16 dbeta, " << what;
  });
}

}  // namespace
}  // namespace cleave::kernels::cpu::layernorm_test
