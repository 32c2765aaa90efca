// gemm / gemm_strided_batched against a naive double reference: every transpose combination, odd shapes,
// padded leading dimensions (padding must stay untouched), beta = 0 over NaN-poisoned C, beta != 0,
// degenerate sizes, both batched code paths (OpenMP over small GEMMs, sequential over large ones),
// stride-0 broadcast, the interleaved per-head layout attention uses, and the OpenMP-sliced path of
// configure_kernel_threads. One test is exact (small integers).
#include "kernels/cpu/gemm.hpp"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <tuple>

#include "kernel_test_util.hpp"
#include "kernels/cpu/blas_runtime.hpp"

namespace cleave::kernels::cpu::gemm_test {
namespace {

using test::expect_close;
using test::random_floats;

// C = alpha op(A) op(B) + beta C in double, row-major, leading dimensions as in gemm.
void gemm_reference(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const float* a, int64_t lda,
                    const float* b, int64_t ldb, double beta, const float* c_in, double* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        const double av = ta ? a[p * lda + i] : a[i * lda + p];
        const double bv = tb ? b[j * ldb + p] : b[p * ldb + j];
        acc += av * bv;
      }
      c[i * ldc + j] = alpha * acc + (beta == 0.0 ? 0.0 : beta * static_cast<double>(c_in[i * ldc + j]));
    }
  }
}

void check_batched(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t batch, bool broadcast_b, float beta);

class GemmAllTransposes : public ::testing::TestWithParam<std::tuple<bool, bool, int>> {};

TEST_P(GemmAllTransposes, MatchesDoubleReferenceWithPaddedLeadingDims) {
  const auto [ta, tb, shape] = GetParam();
  const int64_t shapes[][3] = {{1, 1, 1}, {3, 7, 13}, {37, 65, 13}, {65, 37, 129}, {13, 1, 37}};
  const int64_t m = shapes[shape][0], n = shapes[shape][1], k = shapes[shape][2];
  const int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 2, ldc = n + 5;
  const auto a = random_floats(static_cast<size_t>((ta ? k : m) * lda), 11 + shape);
  const auto b = random_floats(static_cast<size_t>((tb ? n : k) * ldb), 23 + shape);
  for (const float beta : {0.0f, 0.5f}) {
    auto c =
        beta == 0.0f ? test::poisoned(static_cast<size_t>(m * ldc)) : random_floats(static_cast<size_t>(m * ldc), 37);
    const float sentinel = 123.25f;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = n; j < ldc; ++j) c[i * ldc + j] = sentinel;
    const auto c_in = c;
    std::vector<double> want(c.size());
    gemm_reference(ta, tb, m, n, k, 0.75, a.data(), lda, b.data(), ldb, beta, c_in.data(), want.data(), ldc);
    gemm(ta, tb, m, n, k, 0.75f, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
    for (int64_t i = 0; i < m; ++i) {
      expect_close(c.data() + i * ldc, want.data() + i * ldc, static_cast<size_t>(n), 1e-5, 1e-5,
                   "row " + std::to_string(i) + " beta " + std::to_string(beta));
      for (int64_t j = n; j < ldc; ++j) ASSERT_EQ(c[i * ldc + j], sentinel) << "padding written at " << i << "," << j;
    }
    double norm = 0.0;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) norm += std::fabs(c[i * ldc + j]);
    EXPECT_GT(norm, 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, GemmAllTransposes,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool(), ::testing::Range(0, 5)));

// With configure_kernel_threads(2) a large GEMM is sliced over OpenMP threads (along n when n >= m, else
// along m); every transpose, padded leading dimensions, both directions, and the batched sequential path.
TEST(KernelGemm, SlicedOverOpenMpThreads) {
  const int saved_blas = blas_threads();
  const int saved_omp = omp_get_max_threads();
  configure_kernel_threads(2);
  const int64_t shapes[][3] = {{37, 200, 150}, {201, 45, 130}, {64, 4099, 5}};
  for (const auto& shape : shapes) {
    const int64_t m = shape[0], n = shape[1], k = shape[2];
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const int64_t lda = (ta ? m : k) + 1, ldb = (tb ? k : n) + 2, ldc = n + 3;
        const auto a = random_floats(static_cast<size_t>((ta ? k : m) * lda), 3);
        const auto b = random_floats(static_cast<size_t>((tb ? n : k) * ldb), 4);
        auto c = random_floats(static_cast<size_t>(m * ldc), 5);
        const auto c_in = c;
        std::vector<double> want(c.size());
        gemm_reference(ta, tb, m, n, k, -0.5, a.data(), lda, b.data(), ldb, 0.25, c_in.data(), want.data(), ldc);
        gemm(ta, tb, m, n, k, -0.5f, a.data(), lda, b.data(), ldb, 0.25f, c.data(), ldc);
        for (int64_t i = 0; i < m; ++i) {
          expect_close(c.data() + i * ldc, want.data() + i * ldc, static_cast<size_t>(n), 1e-4, 1e-5,
                       "sliced row " + std::to_string(i));
          for (int64_t j = n; j < ldc; ++j) ASSERT_EQ(c[i * ldc + j], c_in[i * ldc + j]) << "padding written";
        }
      }
    }
  }
  check_batched(true, false, 40, 190, 140, 2, false, 0.5f);
  configure_blas_threads(saved_blas);
  omp_set_num_threads(saved_omp);
}

// SliceSide::kRows (oneDNN's side for an untransposed A): the slices tile C's rows in order, the same for every
// thread count in deterministic mode, so each slice is a dense block of C; a C of under 128 rows keeps the longer
// side; kLonger is the default.
TEST(KernelGemm, RowSidePlanTilesRowsUnlessCIsShort) {
  const int64_t shapes[][3] = {{200, 515, 77}, {512, 512, 128}, {130, 900, 64}, {515, 96, 77}};
  for (const auto& shape : shapes) {
    const int64_t m = shape[0], n = shape[1], k = shape[2];
    const auto fixed = gemm_slice_plan(GemmSlicing::kShapeFixed, m, n, k, 1, SliceSide::kRows);
    EXPECT_GT(fixed.size(), 1u) << m << "x" << n << "x" << k;
    for (int threads : {2, 3}) {
      EXPECT_EQ(gemm_slice_plan(GemmSlicing::kShapeFixed, m, n, k, threads, SliceSide::kRows), fixed);
    }
    for (GemmSlicing slicing : {GemmSlicing::kShapeFixed, GemmSlicing::kPerThread}) {
      int64_t next = 0;
      for (const GemmSlice& slice : gemm_slice_plan(slicing, m, n, k, 2, SliceSide::kRows)) {
        EXPECT_FALSE(slice.split_n) << m << "x" << n << "x" << k;
        EXPECT_EQ(slice.lo, next);
        EXPECT_GT(slice.hi, slice.lo);
        next = slice.hi;
      }
      EXPECT_EQ(next, m);
    }
  }
  // 96 rows are too few to cut into two 64-row pieces: the longer side (columns), as kLonger cuts it.
  EXPECT_EQ(gemm_slice_plan(GemmSlicing::kShapeFixed, 96, 515, 77, 2, SliceSide::kRows),
            gemm_slice_plan(GemmSlicing::kShapeFixed, 96, 515, 77, 2, SliceSide::kLonger));
  EXPECT_TRUE(gemm_slice_plan(GemmSlicing::kPerThread, 96, 515, 77, 2, SliceSide::kRows).front().split_n);
  EXPECT_EQ(gemm_slice_plan(GemmSlicing::kPerThread, 512, 512, 128, 2),
            gemm_slice_plan(GemmSlicing::kPerThread, 512, 512, 128, 2, SliceSide::kLonger));
  EXPECT_TRUE(gemm_slice_plan(GemmSlicing::kPerThread, 512, 512, 128, 2).front().split_n);
}

// Deterministic mode: the same bits with 1, 2 and 3 OpenMP threads (slices fixed by the shape), still
// matching the double reference. That the equality is not an accident of one slicing is shown on the slice
// plan, not on OpenBLAS's bits: whether two slicings round differently depends on the kernels the machine's
// OpenBLAS picks (on a Zen 4 with AVX-512 kernels they never did on these shapes), so a bit contrast would
// make the test a property of the BLAS build.
TEST(KernelGemm, DeterministicModeIsIndependentOfTheThreadCount) {
  const int saved_blas = blas_threads();
  const int saved_omp = omp_get_max_threads();
  const int64_t shapes[][3] = {{512, 384, 128}, {130, 500, 77}, {300, 129, 260}};
  for (const auto& shape : shapes) {
    const int64_t m = shape[0], n = shape[1], k = shape[2];
    // The contract on the plan: shape-fixed slices are the same for every thread count, and more than one
    // (so the threads really share the work); per-thread slices change with the thread count.
    const auto fixed = gemm_slice_plan(GemmSlicing::kShapeFixed, m, n, k, 1);
    EXPECT_GT(fixed.size(), 2u) << m << "x" << n << "x" << k;
    for (int threads : {2, 3, 7}) {
      EXPECT_EQ(gemm_slice_plan(GemmSlicing::kShapeFixed, m, n, k, threads), fixed) << threads << " threads";
    }
    EXPECT_EQ(gemm_slice_plan(GemmSlicing::kPerThread, m, n, k, 1).size(), 1u);
    EXPECT_EQ(gemm_slice_plan(GemmSlicing::kPerThread, m, n, k, 2).size(), 2u);
    EXPECT_NE(gemm_slice_plan(GemmSlicing::kPerThread, m, n, k, 3), gemm_slice_plan(GemmSlicing::kPerThread, m, n, k, 2));
    for (GemmSlicing slicing : {GemmSlicing::kShapeFixed, GemmSlicing::kPerThread}) {
      const auto plan = gemm_slice_plan(slicing, m, n, k, 3);  // the slices tile C's longer side, in order
      int64_t next = 0;
      for (const GemmSlice& slice : plan) {
        EXPECT_EQ(slice.split_n, n >= m);
        EXPECT_EQ(slice.lo, next);
        EXPECT_GT(slice.hi, slice.lo);
        next = slice.hi;
      }
      EXPECT_EQ(next, n >= m ? n : m);
    }
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const int64_t lda = ta ? m : k, ldb = tb ? k : n, ldc = n;
        const auto a = random_floats(static_cast<size_t>((ta ? k : m) * lda), 6);
        const auto b = random_floats(static_cast<size_t>((tb ? n : k) * ldb), 7);
        const auto c_in = random_floats(static_cast<size_t>(m * ldc), 8);
        auto run = [&](int threads) {
          configure_kernel_threads(threads);
          auto c = c_in;
          gemm(ta, tb, m, n, k, 1.0f, a.data(), lda, b.data(), ldb, 1.0f, c.data(), ldc, GemmSlicing::kShapeFixed);
          return c;
        };
        const auto one = run(1);
        for (int threads : {2, 3}) {
          const auto many = run(threads);
          ASSERT_EQ(std::memcmp(one.data(), many.data(), one.size() * sizeof(float)), 0)
              << m << "x" << n << "x" << k << " ta " << ta << " tb " << tb << ", " << threads << " threads";
        }
        std::vector<double> want(one.size());
        gemm_reference(ta, tb, m, n, k, 1.0, a.data(), lda, b.data(), ldb, 1.0, c_in.data(), want.data(), ldc);
        expect_close(one.data(), want.data(), one.size(), 1e-4, 1e-5, "deterministic gemm");
      }
    }
  }
  configure_blas_threads(saved_blas);
  omp_set_num_threads(saved_omp);
}

TEST(KernelGemm, SmallIntegerInputsAreExact) {
  const int64_t m = 33, n = 47, k = 65;
  const auto a = test::random_small_ints(static_cast<size_t>(m * k), 1);
  const auto b = test::random_small_ints(static_cast<size_t>(k * n), 2);
  auto c = test::poisoned(static_cast<size_t>(m * n));
  std::vector<double> want(c.size());
  gemm_reference(false, false, m, n, k, 1.0, a.data(), k, b.data(), n, 0.0, nullptr, want.data(), n);
  gemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
  size_t wrong = 0;
  for (size_t i = 0; i < c.size(); ++i) wrong += static_cast<double>(c[i]) == want[i] ? 0 : 1;
  EXPECT_EQ(wrong, 0u);
  EXPECT_GT(test::l2_norm(c), 0.0);
}

TEST(KernelGemm, DegenerateSizes) {
  // k == 0: C = beta * C; beta == 0 writes zeros even over NaN.
  auto c = random_floats(12, 5);
  const auto c0 = c;
  gemm(false, false, 3, 4, 0, 1.0f, nullptr, 1, nullptr, 4, 0.5f, c.data(), 4);
  for (size_t i = 0; i < c.size(); ++i) EXPECT_FLOAT_EQ(c[i], 0.5f * c0[i]);
  auto z = test::poisoned(12);
  gemm(true, true, 3, 4, 0, 1.0f, nullptr, 3, nullptr, 1, 0.0f, z.data(), 4);
  for (float v : z) EXPECT_EQ(v, 0.0f);
  // m == 0 or n == 0: nothing is touched.
  auto untouched = test::poisoned(4);
  gemm(false, false, 0, 4, 3, 1.0f, nullptr, 3, nullptr, 4, 0.0f, untouched.data(), 4);
  gemm(false, false, 1, 0, 3, 1.0f, nullptr, 3, nullptr, 1, 0.0f, untouched.data(), 1);
  for (float v : untouched) EXPECT_TRUE(std::isnan(v));
}

TEST(KernelGemm, BadLeadingDimensionIsABug) {
  std::vector<float> a(6, 1.0f), b(6, 1.0f), c(4, 0.0f);
  EXPECT_THROW(gemm(false, false, 2, 2, 3, 1.0f, a.data(), 2, b.data(), 2, 0.0f, c.data(), 2), InternalError);
  EXPECT_THROW(gemm(false, false, -1, 2, 3, 1.0f, a.data(), 3, b.data(), 2, 0.0f, c.data(), 2), InternalError);
}

// Batched: compares every batch entry with the reference; stride padding between matrices must survive.
void check_batched(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t batch, bool broadcast_b, float beta) {
  const int64_t lda = ta ? m : k, ldb = tb ? k : n, ldc = n;
  const int64_t size_a = (ta ? k : m) * lda, size_b = (tb ? n : k) * ldb, size_c = m * ldc;
  const int64_t stride_a = size_a + 3, stride_b = broadcast_b ? 0 : size_b + 1, stride_c = size_c + 2;
  const auto a = random_floats(static_cast<size_t>(stride_a * batch), 101);
  const auto b = random_floats(static_cast<size_t>(broadcast_b ? size_b : stride_b * batch), 202);
  auto c = beta == 0.0f ? test::poisoned(static_cast<size_t>(stride_c * batch))
                        : random_floats(static_cast<size_t>(stride_c * batch), 303);
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t j = size_c; j < stride_c; ++j) c[i * stride_c + j] = -7.0f;
  const auto c_in = c;
  gemm_strided_batched(ta, tb, m, n, k, 1.25f, a.data(), lda, stride_a, b.data(), ldb, stride_b, beta, c.data(), ldc,
                       stride_c, batch);
  for (int64_t i = 0; i < batch; ++i) {
    std::vector<double> want(static_cast<size_t>(size_c));
    gemm_reference(ta, tb, m, n, k, 1.25, a.data() + i * stride_a, lda, b.data() + i * stride_b, ldb, beta,
                   c_in.data() + i * stride_c, want.data(), ldc);
    expect_close(c.data() + i * stride_c, want.data(), static_cast<size_t>(size_c), 1e-4, 1e-5,
                 "batch entry " + std::to_string(i));
    for (int64_t j = size_c; j < stride_c; ++j) ASSERT_EQ(c[i * stride_c + j], -7.0f) << "gap written";
  }
  EXPECT_GT(test::l2_norm(c), 0.0);
}

TEST(KernelGemm, StridedBatchedSmallMatricesAllTransposes) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) check_batched(ta, tb, 7, 13, 5, 9, false, 0.0f);
}

TEST(KernelGemm, StridedBatchedOpenMpPath) {
  // Each GEMM small enough for OpenBLAS to run single-threaded, the batch large enough to spread.
  for (bool ta : {false, true})
    for (bool tb : {false, true}) check_batched(ta, tb, 32, 33, 31, 16, false, ta ? 0.5f : 0.0f);
}

TEST(KernelGemm, StridedBatchedLargeMatricesSequentialPath) {
  check_batched(false, true, 65, 70, 67, 3, false, 0.5f);  // m*n*k above OpenBLAS's single-thread threshold
  check_batched(true, false, 71, 65, 66, 2, false, 0.0f);
}

TEST(KernelGemm, StridedBatchedBroadcastAndDegenerate) {
  check_batched(false, false, 3, 37, 13, 5, true, 0.0f);
  check_batched(true, true, 1, 1, 1, 3, false, 0.5f);
  auto c = test::poisoned(8);
  gemm_strided_batched(false, false, 2, 2, 3, 1.0f, nullptr, 3, 6, nullptr, 2, 6, 0.0f, c.data(), 2, 4, 0);
  for (float v : c) EXPECT_TRUE(std::isnan(v));  // batch 0 touches nothing
  gemm_strided_batched(false, false, 2, 2, 0, 1.0f, nullptr, 1, 0, nullptr, 2, 0, 0.0f, c.data(), 2, 4, 2);
  for (float v : c) EXPECT_EQ(v, 0.0f);  // k == 0, beta == 0 zeroes every entry
}

TEST(KernelGemm, StridedBatchedInterleavedHeadColumns) {
  // The attention layout: H heads of width hd side by side in rows of width ld = H*hd.
  const int64_t T = 9, H = 3, hd = 5, ld = H * hd;
  const auto q = random_floats(static_cast<size_t>(T * ld), 7);
  const auto k = random_floats(static_cast<size_t>(T * ld), 8);
  auto s = test::poisoned(static_cast<size_t>(H * T * T));
  gemm_strided_batched(false, true, T, T, hd, 1.0f, q.data(), ld, hd, k.data(), ld, hd, 0.0f, s.data(), T, T * T, H);
  auto o = test::poisoned(static_cast<size_t>(T * ld));
  gemm_strided_batched(false, false, T, hd, T, 1.0f, s.data(), T, T * T, k.data(), ld, hd, 0.0f, o.data(), ld, hd, H);
  for (int64_t h = 0; h < H; ++h) {
    std::vector<double> want_s(static_cast<size_t>(T * T)), want_o(static_cast<size_t>(T * ld));
    gemm_reference(false, true, T, T, hd, 1.0, q.data() + h * hd, ld, k.data() + h * hd, ld, 0.0, nullptr,
                   want_s.data(), T);
    expect_close(s.data() + h * T * T, want_s.data(), static_cast<size_t>(T * T), 1e-5, 1e-5, "scores");
    gemm_reference(false, false, T, hd, T, 1.0, s.data() + h * T * T, T, k.data() + h * hd, ld, 0.0, nullptr,
                   want_o.data(), ld);
    for (int64_t t = 0; t < T; ++t)
      expect_close(o.data() + t * ld + h * hd, want_o.data() + t * ld, static_cast<size_t>(hd), 1e-4, 1e-5, "out");
  }
}

}  // namespace
}  // namespace cleave::kernels::cpu::gemm_test
