// Every GEMM library of gemm_backend.hpp against a double reference, and the determinism contract for each.
// Asserts, for each library this build links (a library not built is skipped, saying so; nothing here depends on
// the CPU: oneDNN's bf16 kernels run with or without bf16 instructions):
//  - f32: every transpose combination on odd shapes, padded leading dimensions (padding untouched), alpha,
//    beta = 0 over NaN-poisoned C and beta != 0, a batched and a broadcast batched product, both sliced and whole;
//  - bf16 operands (libraries with bf16 kernels): the same against a double reference on the bf16-rounded
//    operands, into f32 C and into bf16 C (one rounding at the end); a library without bf16 kernels, or
//    oneDNN where it has no bf16 matmul (a CPU without AVX-512), refuses gemm_bf16 instead;
//  - GemmSlicing::kShapeFixed: the same GEMM at 1 and 2 OpenMP threads gives bit-identical C (f32 and bf16).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/cpu/cast.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/onednn_matmuls.hpp"

namespace cleave::kernels::cpu::gemm_backends_test {
namespace {

using test::expect_close;
using test::random_floats;

constexpr GemmBackend kAll[] = {GemmBackend::kOpenBlas, GemmBackend::kBlis, GemmBackend::kOneDnn};

#define SKIP_UNLESS_BUILT(backend)                                                                              \
  if (!gemm_backend_built(backend)) {                                                                           \
    GTEST_SKIP() << "the " << gemm_backend_name(backend) << " library is not built into this cleave (CMake did " \
                 << "not find it)";                                                                             \
  }

// C = alpha op(A) op(B) + beta C in double; also sum |alpha a b| per element (the error scale).
void reference(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const std::vector<float>& a,
               int64_t lda, const std::vector<float>& b, int64_t ldb, double beta, const std::vector<float>& c_in,
               int64_t ldc, std::vector<double>& c, std::vector<double>& scale) {
  c.assign(c_in.begin(), c_in.end());
  scale.assign(c_in.size(), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0, mag = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        const double prod = static_cast<double>(ta ? a[p * lda + i] : a[i * lda + p]) *
                            static_cast<double>(tb ? b[j * ldb + p] : b[p * ldb + j]);
        acc += prod;
        mag += std::fabs(prod);
      }
      const double old = beta == 0.0 ? 0.0 : beta * static_cast<double>(c_in[i * ldc + j]);
      c[i * ldc + j] = alpha * acc + old;
      scale[i * ldc + j] = std::fabs(alpha) * mag + std::fabs(old);
    }
  }
}

// |got - want| <= tol * scale (+ rtol_out * |want| for a bf16 C), padding equal to the sentinel; counts misses.
void expect_matches(const std::vector<float>& got, const std::vector<double>& want, const std::vector<double>& scale,
                    int64_t m, int64_t n, int64_t ldc, double tol, double rtol_out, const std::string& what) {
  size_t wrong = 0, padding = 0;
  std::string first;
  double norm = 0.0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const size_t e = static_cast<size_t>(i * ldc + j);
      if (j >= n) {
        padding += got[e] != static_cast<float>(want[e]);
        continue;
      }
      norm += std::fabs(got[e]);
      const double err = std::fabs(static_cast<double>(got[e]) - want[e]);
      if (!(err <= tol * scale[e] + rtol_out * std::fabs(want[e]) + 1e-30)) {
        if (wrong < 4) first += "\n  [" + std::to_string(i) + "," + std::to_string(j) + "] got " +
                                std::to_string(got[e]) + " want " + std::to_string(want[e]);
        ++wrong;
      }
    }
  }
  EXPECT_EQ(wrong, 0u) << what << ": " << wrong << " of " << m * n << " elements off" << first;
  EXPECT_EQ(padding, 0u) << what << ": padding past n was written";
  EXPECT_GT(norm, 0.0) << what << ": all-zero result";
}

std::vector<float> round_to_bf16(const std::vector<float>& v, std::vector<std::uint16_t>& bits) {
  bits.resize(v.size());
  cast_f32_to_bf16(v.data(), bits.data(), static_cast<int64_t>(v.size()));
  std::vector<float> rounded(v.size());
  cast_bf16_to_f32(bits.data(), rounded.data(), static_cast<int64_t>(v.size()));
  return rounded;
}

struct Shape {
  int64_t m, n, k;
};
// Odd sizes, one below and one above the slicing threshold (m*n*k >= 2^20, sliced over the team).
constexpr Shape kShapes[] = {{1, 1, 1}, {3, 7, 13}, {37, 65, 13}, {65, 37, 129}, {131, 97, 101}, {257, 190, 61}};

class GemmBackendTest : public ::testing::TestWithParam<std::tuple<GemmBackend, bool, bool>> {};

TEST_P(GemmBackendTest, F32MatchesDoubleReference) {
  const auto [backend, ta, tb] = GetParam();
  SKIP_UNLESS_BUILT(backend);
  OneDnnMatmuls matmuls;  // the run state oneDNN keeps (ignored by the others)
  const GemmLibrary library{backend, &matmuls};
  int seed = 0;
  for (const Shape& s : kShapes) {
    for (const GemmSlicing slicing : {GemmSlicing::kPerThread, GemmSlicing::kShapeFixed}) {
      for (const float beta : {0.0f, -0.5f}) {
        ++seed;
        const int64_t lda = (ta ? s.m : s.k) + 3, ldb = (tb ? s.k : s.n) + 2, ldc = s.n + 5;
        const auto a = random_floats(static_cast<size_t>((ta ? s.k : s.m) * lda), 100 + seed);
        const auto b = random_floats(static_cast<size_t>((tb ? s.n : s.k) * ldb), 200 + seed);
        auto c = beta == 0.0f ? test::poisoned(static_cast<size_t>(s.m * ldc))
                              : random_floats(static_cast<size_t>(s.m * ldc), 300 + seed);
        for (int64_t i = 0; i < s.m; ++i)
          for (int64_t j = s.n; j < ldc; ++j) c[static_cast<size_t>(i * ldc + j)] = 7.25f;
        std::vector<double> want, scale;
        reference(ta, tb, s.m, s.n, s.k, 0.75, a, lda, b, ldb, beta, c, ldc, want, scale);
        gemm(ta, tb, s.m, s.n, s.k, 0.75f, a.data(), lda, b.data(), ldb, beta, c.data(), ldc, slicing, library);
        expect_matches(c, want, scale, s.m, s.n, ldc, 1e-5, 0.0,
                       std::string(gemm_backend_name(backend)) + " f32 " + std::to_string(s.m) + "x" +
                           std::to_string(s.n) + "x" + std::to_string(s.k) + " beta " + std::to_string(beta));
      }
    }
  }
}

TEST_P(GemmBackendTest, Bf16OperandsMatchDoubleReferenceOrAreRefused) {
  const auto [backend, ta, tb] = GetParam();
  SKIP_UNLESS_BUILT(backend);
  OneDnnMatmuls matmuls;  // the run state oneDNN keeps (ignored by the others)
  const GemmLibrary library{backend, &matmuls};
  // No bf16 kernels in the library (its bf16 runs widen to f32), or none in oneDNN on this CPU: a refusal.
  if (!gemm_backend_has_bf16(backend) || !onednn_bf16_supported()) {
    std::vector<std::uint16_t> x(4, 0x3f80);
    std::vector<float> c(4);
    EXPECT_ANY_THROW(gemm_bf16(library, ta, tb, 2, 2, 2, 1.0f, x.data(), 2, x.data(), 2, 0.0f,
                               Bf16GemmOut{c.data(), nullptr}, 2));
    return;
  }
  int seed = 0;
  for (const Shape& s : kShapes) {
    for (const bool bf16_c : {false, true}) {
      for (const float beta : {0.0f, 0.5f}) {
        ++seed;
        const int64_t lda = (ta ? s.m : s.k) + 1, ldb = (tb ? s.k : s.n) + 3, ldc = s.n + 2;
        std::vector<std::uint16_t> a_bits, b_bits, c_bits;
        const auto a = round_to_bf16(random_floats(static_cast<size_t>((ta ? s.k : s.m) * lda), 400 + seed), a_bits);
        const auto b = round_to_bf16(random_floats(static_cast<size_t>((tb ? s.n : s.k) * ldb), 500 + seed), b_bits);
        auto c = beta == 0.0f && !bf16_c ? test::poisoned(static_cast<size_t>(s.m * ldc))
                                         : random_floats(static_cast<size_t>(s.m * ldc), 600 + seed);
        for (int64_t i = 0; i < s.m; ++i)
          for (int64_t j = s.n; j < ldc; ++j) c[static_cast<size_t>(i * ldc + j)] = 7.25f;
        if (bf16_c) c = round_to_bf16(c, c_bits);
        std::vector<double> want, scale;
        reference(ta, tb, s.m, s.n, s.k, 1.25, a, lda, b, ldb, beta, c, ldc, want, scale);
        Bf16GemmOut out;
        if (bf16_c) {
          out.bf16 = c_bits.data();
        } else {
          out.f32 = c.data();
        }
        gemm_bf16(library, ta, tb, s.m, s.n, s.k, 1.25f, a_bits.data(), lda, b_bits.data(), ldb, beta, out, ldc,
                  GemmSlicing::kPerThread);
        if (bf16_c) cast_bf16_to_f32(c_bits.data(), c.data(), static_cast<int64_t>(c.size()));
        // f32 accumulation of exact bf16 products: the f32 bound; a bf16 C adds one rounding (2^-8 relative).
        expect_matches(c, want, scale, s.m, s.n, ldc, 1e-5, bf16_c ? 1.0 / 256.0 : 0.0,
                       std::string(gemm_backend_name(backend)) + " bf16 operands, " + (bf16_c ? "bf16" : "f32") +
                           " C " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Libraries, GemmBackendTest,
                         ::testing::Combine(::testing::ValuesIn(kAll), ::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(gemm_backend_name(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_At" : "_A") + (std::get<2>(info.param) ? "_Bt" : "_B");
                         });

class GemmBackendBatchedTest : public ::testing::TestWithParam<GemmBackend> {};

// The two batched paths (small GEMMs spread over the team, large ones each sliced) and a broadcast B.
TEST_P(GemmBackendBatchedTest, BatchedMatchesDoubleReference) {
  const GemmBackend backend = GetParam();
  SKIP_UNLESS_BUILT(backend);
  OneDnnMatmuls matmuls;  // the run state oneDNN keeps (ignored by the others)
  const GemmLibrary library{backend, &matmuls};
  const Shape shapes[] = {{16, 24, 8}, {130, 140, 70}};
  int seed = 0;
  for (const Shape& s : shapes) {
    for (const bool broadcast_b : {false, true}) {
      ++seed;
      const int64_t batch = 5;
      const auto a = random_floats(static_cast<size_t>(batch * s.m * s.k), 700 + seed);
      const auto b = random_floats(static_cast<size_t>((broadcast_b ? 1 : batch) * s.k * s.n), 800 + seed);
      auto c = test::poisoned(static_cast<size_t>(batch * s.m * s.n));
      gemm_strided_batched(false, false, s.m, s.n, s.k, 1.0f, a.data(), s.k, s.m * s.k, b.data(), s.n,
                           broadcast_b ? 0 : s.k * s.n, 0.0f, c.data(), s.n, s.m * s.n, batch,
                           GemmSlicing::kPerThread, library);
      for (int64_t e = 0; e < batch; ++e) {
        const std::vector<float> ae(a.begin() + e * s.m * s.k, a.begin() + (e + 1) * s.m * s.k);
        const int64_t off_b = broadcast_b ? 0 : e * s.k * s.n;
        const std::vector<float> be(b.begin() + off_b, b.begin() + off_b + s.k * s.n);
        const std::vector<float> ce(c.begin() + e * s.m * s.n, c.begin() + (e + 1) * s.m * s.n);
        std::vector<double> want, scale;
        reference(false, false, s.m, s.n, s.k, 1.0, ae, s.k, be, s.n, 0.0, std::vector<float>(ce.size(), 0.0f), s.n,
                  want, scale);
        expect_matches(ce, want, scale, s.m, s.n, s.n, 1e-5, 0.0,
                       std::string(gemm_backend_name(backend)) + " batch entry " + std::to_string(e));
      }
    }
  }
}

// Deterministic mode: GemmSlicing::kShapeFixed gives the same bits at 1 and 2 OpenMP threads, f32 and bf16
// operands, on shapes that are sliced (above 2^20 multiply-adds) along n and along m. The operands span 12 binades:
// bf16 x bf16 products of one binade mostly add exactly in f32, where a sum over k in another order at 2 threads
// could pass unseen (checked: k split in two at 2 threads fails here).
TEST_P(GemmBackendBatchedTest, ShapeFixedSlicingIsBitIdenticalAcrossThreadCounts) {
  const GemmBackend backend = GetParam();
  SKIP_UNLESS_BUILT(backend);
  OneDnnMatmuls matmuls;  // the run state oneDNN keeps (ignored by the others)
  const GemmLibrary library{backend, &matmuls};
  const int saved = omp_get_max_threads();
  const Shape shapes[] = {{96, 515, 77}, {515, 96, 77}, {200, 333, 129}};
  int seed = 0;
  for (const Shape& s : shapes) {
    for (const bool ta : {false, true}) {
      ++seed;
      const int64_t lda = ta ? s.m : s.k, ldb = s.n;
      const auto a = test::random_floats_spanning_binades(static_cast<size_t>(s.m * s.k), 900 + seed, 12);
      const auto b = test::random_floats_spanning_binades(static_cast<size_t>(s.k * s.n), 950 + seed, 12);
      std::vector<std::uint16_t> a_bits, b_bits;
      round_to_bf16(a, a_bits);
      round_to_bf16(b, b_bits);
      std::vector<std::vector<float>> f32_runs, bf16_runs;
      for (const int threads : {1, 2}) {
        omp_set_num_threads(threads);
        auto c = test::poisoned(static_cast<size_t>(s.m * s.n));
        gemm(ta, false, s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), s.n,
             GemmSlicing::kShapeFixed, library);
        f32_runs.push_back(c);
        if (gemm_backend_has_bf16(backend) && onednn_bf16_supported()) {
          std::vector<float> cb(static_cast<size_t>(s.m * s.n), 0.0f);
          gemm_bf16(library, ta, false, s.m, s.n, s.k, 1.0f, a_bits.data(), lda, b_bits.data(), ldb, 0.0f,
                    Bf16GemmOut{cb.data(), nullptr}, s.n, GemmSlicing::kShapeFixed);
          bf16_runs.push_back(cb);
        }
      }
      omp_set_num_threads(saved);
      const std::string what = std::string(gemm_backend_name(backend)) + " " + std::to_string(s.m) + "x" +
                               std::to_string(s.n) + "x" + std::to_string(s.k) + (ta ? " A^T" : "");
      EXPECT_GT(test::l2_norm(f32_runs[0]), 0.0) << what;
      EXPECT_EQ(std::memcmp(f32_runs[0].data(), f32_runs[1].data(), f32_runs[0].size() * sizeof(float)), 0)
          << what << ": f32 C differs between 1 and 2 threads";
      if (!bf16_runs.empty()) {
        EXPECT_GT(test::l2_norm(bf16_runs[0]), 0.0) << what;
        EXPECT_EQ(std::memcmp(bf16_runs[0].data(), bf16_runs[1].data(), bf16_runs[0].size() * sizeof(float)), 0)
            << what << ": bf16-operand C differs between 1 and 2 threads";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Libraries, GemmBackendBatchedTest, ::testing::ValuesIn(kAll),
                         [](const auto& info) { return std::string(gemm_backend_name(info.param)); });

TEST(GemmBackend, NamesAndBuildFacts) {
  EXPECT_STREQ(gemm_backend_name(GemmBackend::kOpenBlas), "openblas");
  EXPECT_STREQ(gemm_backend_name(GemmBackend::kBlis), "blis");
  EXPECT_STREQ(gemm_backend_name(GemmBackend::kOneDnn), "onednn");
  EXPECT_TRUE(gemm_backend_built(GemmBackend::kOpenBlas));
  EXPECT_FALSE(gemm_backend_has_bf16(GemmBackend::kOpenBlas));
  EXPECT_TRUE(gemm_backend_has_bf16(GemmBackend::kOneDnn));
  for (const GemmBackend b : kAll) {
    EXPECT_EQ(gemm_backend_description(b) == "not built", !gemm_backend_built(b)) << gemm_backend_name(b);
  }
}

TEST(GemmBackend, Bf16OnALibraryWithoutBf16KernelsIsRefused) {
  std::vector<std::uint16_t> a(4, 0x3f80), b(4, 0x3f80);
  std::vector<float> c(4);
  EXPECT_ANY_THROW(gemm_bf16({GemmBackend::kOpenBlas}, false, false, 2, 2, 2, 1.0f, a.data(), 2, b.data(), 2, 0.0f,
                             Bf16GemmOut{c.data(), nullptr}, 2));
}

}  // namespace
}  // namespace cleave::kernels::cpu::gemm_backends_test
