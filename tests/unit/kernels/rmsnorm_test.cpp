// RMSNorm kernels against double references on awkward shapes (odd rows, one column, a width past the
// column block, rows 1 / 17 / 130 by widths 6 / 64 / 96); the input gradient is also checked by central finite
// differences of a double loss, and the weight gradient accumulates (+=) onto a non-zero start. Every vector path
// this CPU has (AVX2, AVX-512) gives the baseline path's bits, and 1 and 2 threads give the same bits.
#include "kernels/cpu/rmsnorm.hpp"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "kernel_test_util.hpp"
#include "kernels/cpu/parallel.hpp"
#include "support/isa_paths.hpp"

namespace cleave::kernels::cpu::rmsnorm_test {
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
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {7, 6}, {13, 37}, {33, 300}, {1, 6}, {1, 64}, {1, 96},
                            {17, 6}, {17, 64}, {17, 96}, {130, 6}, {130, 64}, {130, 96}}) {
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
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 2}, {9, 6}, {17, 129}, {1, 6}, {1, 64}, {1, 96},
                            {17, 6}, {17, 64}, {17, 96}, {130, 6}, {130, 64}, {130, 96}, {300, 260}}) {
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

struct Outputs {
  std::vector<float> y, rstd, dx, dw;
};

Outputs run_all(VectorIsa isa, const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& dy,
                int64_t rows, int64_t cols) {
  Outputs o{test::poisoned(x.size()), test::poisoned(static_cast<size_t>(rows)), test::poisoned(x.size()),
            test::random_floats(static_cast<size_t>(cols), 99)};
  rmsnorm_forward_isa(isa, x.data(), w.data(), o.y.data(), o.rstd.data(), rows, cols, kEps);
  rmsnorm_backward_input_isa(isa, dy.data(), x.data(), w.data(), o.rstd.data(), o.dx.data(), rows, cols);
  rmsnorm_backward_weight_isa(isa, dy.data(), x.data(), o.rstd.data(), o.dw.data(), rows, cols);
  return o;
}

void expect_same_bits(const Outputs& a, const Outputs& b, const std::string& what) {
  EXPECT_EQ(std::memcmp(a.y.data(), b.y.data(), a.y.size() * sizeof(float)), 0) << "y, " << what;
  EXPECT_EQ(std::memcmp(a.rstd.data(), b.rstd.data(), a.rstd.size() * sizeof(float)), 0) << "rstd, " << what;
  EXPECT_EQ(std::memcmp(a.dx.data(), b.dx.data(), a.dx.size() * sizeof(float)), 0) << "dx, " << what;
  EXPECT_EQ(std::memcmp(a.dw.data(), b.dw.data(), a.dw.size() * sizeof(float)), 0) << "dweight, " << what;
}

// Widths below, at and past 16 (the lane sums' width) and the weight gradient's 128-column block; a row count
// large enough to go parallel; an infinity and a NaN in a row that is a full vector on one path and a tail on
// another propagate the same way.
TEST(KernelRmsNorm, EveryIsaPathGivesTheSameBits) {
  EXPECT_TRUE(vector_isa_available(VectorIsa::kBaseline));
  double norm = 0.0;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 6}, {17, 64}, {130, 96}, {3, 1}, {5, 15}, {5, 17},
                            {9, 31}, {4, 129}, {400, 260}}) {
    auto x = test::random_floats(static_cast<size_t>(rows * cols), 21, 3.0f);
    const auto w = test::random_floats(static_cast<size_t>(cols), 22);
    const auto dy = test::random_floats(x.size(), 23);
    if (rows >= 3) {
      x[static_cast<size_t>(cols + cols - 1)] = std::numeric_limits<float>::infinity();
      x[static_cast<size_t>(2 * cols)] = std::numeric_limits<float>::quiet_NaN();
    }
    const Outputs base = run_all(VectorIsa::kBaseline, x, w, dy, rows, cols);
    for (float v : base.dx) norm += std::isfinite(v) ? std::fabs(v) : 0.0;
    test::for_each_isa_path(test::kIsaPathsPastBaseline, [&](VectorIsa isa) {
      expect_same_bits(run_all(isa, x, w, dy, rows, cols), base,
                       test::isa_label(isa) + ", rows " + std::to_string(rows) + ", cols " + std::to_string(cols));
    });
  }
  EXPECT_GT(norm, 0.0);
}

// The deterministic contract: the thread count never changes a bit (shapes that go parallel, and one that does not).
TEST(KernelRmsNorm, OneAndTwoThreadsGiveTheSameBits) {
  const int saved = omp_get_max_threads();
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{17, 96}, {1024, 128}, {520, 260}}) {
    const auto x = test::random_floats(static_cast<size_t>(rows * cols), 31, 2.0f);
    const auto w = test::random_floats(static_cast<size_t>(cols), 32);
    const auto dy = test::random_floats(x.size(), 33);
    omp_set_num_threads(1);
    const Outputs one = run_all(best_vector_isa(), x, w, dy, rows, cols);
    omp_set_num_threads(2);
    const Outputs two = run_all(best_vector_isa(), x, w, dy, rows, cols);
    omp_set_num_threads(saved);
    expect_same_bits(one, two, "rows " + std::to_string(rows) + ", cols " + std::to_string(cols));
    EXPECT_GT(test::l2_norm(one.dx), 0.0);
  }
}


// Operands over 41 binades (2^-20 to 2^20, either sign): values of one binade would mostly add exactly, and then no
// change in the order of the additions could be told apart.
std::vector<float> many_binades(size_t n, uint64_t seed) {
  return test::random_floats_spanning_binades(n, seed, 41, 0x1p21f);
}

// The serial loop the weight gradient's bits are defined by: column c's terms (dy * x) * rstd added in row order from
// +0, then added to dweight.
__attribute__((optimize("fp-contract=off"))) void row_order_weight_sums(const std::vector<float>& dy,
                                                                         const std::vector<float>& x,
                                                                         const std::vector<float>& rstd,
                                                                         std::vector<float>& dweight, int64_t rows,
                                                                         int64_t cols) {
  for (int64_t c = 0; c < cols; ++c) {
    float acc = 0.0f;
    for (int64_t r = 0; r < rows; ++r) acc += dy[r * cols + c] * x[r * cols + c] * rstd[r];
    dweight[c] += acc;
  }
}

// The weight gradient: widths below, at and past the 128-column block, row counts
// that run serially and (the last shape) on the team, operands over many binades, an infinity and a NaN in dy. Every
// path at 1, 2 and 3 threads gives the bits of the row-order loop, f32 and bf16 operands.
TEST(KernelRmsNormWeight, PathsAndThreadCountsGiveTheRowOrderBitsOverManyBinades) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {3, 13}, {9, 63}, {17, 64}, {5, 65}, {300, 127},
                            {130, 256}, {40, 1000}, {1040, 1010}}) {
    auto dy = many_binades(static_cast<size_t>(rows * cols), 61);
    if (rows >= 8) {
      dy[static_cast<size_t>(5 * cols)] = std::numeric_limits<float>::infinity();
      dy[static_cast<size_t>(7 * cols + cols - 1)] = std::numeric_limits<float>::quiet_NaN();
    }
    const auto x = many_binades(dy.size(), 62);
    auto rstd = many_binades(static_cast<size_t>(rows), 63);
    for (float& v : rstd) v = std::fabs(v);
    const auto dy16 = test::narrowed(many_binades(dy.size(), 64));
    const auto x16 = test::narrowed(many_binades(dy.size(), 65));
    const auto start = many_binades(static_cast<size_t>(cols), 66);
    auto want = start, want16 = start;
    row_order_weight_sums(dy, x, rstd, want, rows, cols);
    row_order_weight_sums(test::widened(dy16), test::widened(x16), rstd, want16, rows, cols);
    if (rows >= 8) {
      EXPECT_TRUE(std::isinf(want[0]) && std::isnan(want[static_cast<size_t>(cols - 1)]));
    }
    EXPECT_GT(test::l2_norm(want16), 0.0);
    if (rows == 1040) {
      EXPECT_TRUE(detail::worth_parallel_columns(2 * rows * cols)) << "would not use the team";
    }
    test::for_each_isa_path_and_threads([&](VectorIsa isa, int threads) {
      const std::string what = test::isa_label(isa) + ", " + std::to_string(threads) + " threads, rows " +
                               std::to_string(rows) + ", cols " + std::to_string(cols);
      auto got = start, got16 = start;
      rmsnorm_backward_weight_isa(isa, dy.data(), x.data(), rstd.data(), got.data(), rows, cols);
      rmsnorm_backward_weight_isa(isa, dy16.data(), x16.data(), rstd.data(), got16.data(), rows, cols);
      EXPECT_TRUE(test::same_bits(got, want)) << "f32, " << what;
      EXPECT_TRUE(test::same_bits(got16, want16)) << "bf16, " << what;
    });
  }
}

}  // namespace
}  // namespace cleave::kernels::cpu::rmsnorm_test
