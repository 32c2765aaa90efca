// The run state of oneDNN's GEMM kernels (kernels/cpu/onednn_matmuls.hpp), where this build has oneDNN (skipped
// otherwise, saying so). Asserts:
//  - steady state: a second round of a run's GEMMs (f32, and bf16 operands where oneDNN has a bf16 matmul; sliced
//    over 2 threads, so two slices run one primitive at once) makes no primitive and no scratchpad, grows none,
//    and gives the bits of the first round;
//  - the cache changes no bit: every GEMM through a warm state equals the same GEMM through a fresh one;
//  - two states (two runs) share nothing: work through one leaves the other empty;
//  - varying shapes (GemmShape::kVarying, a grouped GEMM's groups): every m and k of one layout runs on one
//    primitive (issue 33: a primitive per row count), f32 and bf16 operands, alpha and beta applied, each result
//    against a double reference;
//  - a oneDNN GEMM without a state is refused, naming what is missing.
#include <gtest/gtest.h>
#include <omp.h>

#include <iterator>
#include <string>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/onednn_matmuls.hpp"

namespace cleave::kernels::cpu::onednn_matmuls_test {
namespace {

#define SKIP_UNLESS_ONEDNN()                                                                  \
  if (!gemm_backend_built(GemmBackend::kOneDnn)) {                                            \
    GTEST_SKIP() << "the onednn library is not built into this cleave (CMake did not find it)"; \
  }

struct Shape {
  int64_t m, n, k;
  bool ta, tb;
};
// Whole and sliced (above 2^20 multiply-adds: two slices at two threads), every transpose.
constexpr Shape kShapes[] = {{7, 5, 3, false, false}, {33, 17, 9, true, false}, {200, 160, 96, false, true},
                             {160, 200, 96, true, true}, {256, 128, 64, false, false}};

// C of every shape in turn (f32 operands, then bf16 operands with f32 C where oneDNN has a bf16 matmul), through
// `matmuls` or, when null, through a fresh state per GEMM.
std::vector<std::vector<float>> run_all(OneDnnMatmuls* matmuls, GemmSlicing slicing) {
  std::vector<std::vector<float>> out;
  int seed = 0;
  for (const Shape& s : kShapes) {
    ++seed;
    const auto a = test::random_floats(static_cast<size_t>(s.m * s.k), 10 + seed);
    const auto b = test::random_floats(static_cast<size_t>(s.k * s.n), 20 + seed);
    const int64_t lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
    OneDnnMatmuls fresh;
    const GemmLibrary library{GemmBackend::kOneDnn, matmuls != nullptr ? matmuls : &fresh};
    std::vector<float> c = test::poisoned(static_cast<size_t>(s.m * s.n));
    gemm(s.ta, s.tb, s.m, s.n, s.k, 0.5f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), s.n, slicing, library);
    out.push_back(c);
    if (onednn_bf16_supported()) {
      const auto a16 = test::narrowed(a), b16 = test::narrowed(b);
      std::vector<float> c16 = test::random_floats(static_cast<size_t>(s.m * s.n), 30 + seed);
      gemm_bf16(library, s.ta, s.tb, s.m, s.n, s.k, 1.0f, a16.data(), lda, b16.data(), ldb, 0.5f,
                Bf16GemmOut{c16.data(), nullptr}, s.n, slicing);
      out.push_back(c16);
    }
  }
  return out;
}

void expect_same_bits(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want,
                      const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_GT(test::l2_norm(got[i]), 0.0) << what << ", GEMM " << i;
    EXPECT_TRUE(test::same_bits(got[i], want[i])) << what << ": GEMM " << i << " differs";
  }
}

TEST(OneDnnMatmuls, SteadyStateMakesNothingAndKeepsTheBits) {
  SKIP_UNLESS_ONEDNN();
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  for (const GemmSlicing slicing : {GemmSlicing::kPerThread, GemmSlicing::kShapeFixed}) {
    OneDnnMatmuls matmuls;
    const auto first = run_all(&matmuls, slicing);
    const size_t primitives = matmuls.primitives(), scratchpads = matmuls.scratchpads();
    const size_t bytes = matmuls.scratchpad_bytes();
    EXPECT_GE(primitives, std::size(kShapes)) << "every shape made its primitive";
    EXPECT_GE(scratchpads, 1u);
    const auto second = run_all(&matmuls, slicing);
    EXPECT_EQ(matmuls.primitives(), primitives) << "a second round made primitives";
    EXPECT_EQ(matmuls.scratchpads(), scratchpads) << "a second round made scratchpads";
    EXPECT_EQ(matmuls.scratchpad_bytes(), bytes) << "a second round grew the scratchpads";
    expect_same_bits(second, first, "second round against the first");
  }
  omp_set_num_threads(saved);
}

TEST(OneDnnMatmuls, CachedPrimitivesGiveTheBitsOfFreshOnes) {
  SKIP_UNLESS_ONEDNN();
  for (const GemmSlicing slicing : {GemmSlicing::kPerThread, GemmSlicing::kShapeFixed}) {
    OneDnnMatmuls warm;
    run_all(&warm, slicing);
    expect_same_bits(run_all(&warm, slicing), run_all(nullptr, slicing), "warm state against fresh states");
  }
}

TEST(OneDnnMatmuls, TwoRunsShareNothing) {
  SKIP_UNLESS_ONEDNN();
  OneDnnMatmuls one, other;
  run_all(&one, GemmSlicing::kPerThread);
  EXPECT_GT(one.primitives(), 0u);
  EXPECT_EQ(other.primitives(), 0u);
  EXPECT_EQ(other.scratchpads(), 0u);
}

// C = alpha op(A) op(B) + beta C0 in double, row-major with leading dimensions.
std::vector<double> reference(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                              const std::vector<float>& a, int64_t lda, const std::vector<float>& b, int64_t ldb,
                              float beta, const std::vector<float>& c0, int64_t ldc) {
  std::vector<double> c(static_cast<size_t>(m * ldc));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) {
        s += double(a[static_cast<size_t>(ta ? p * lda + i : i * lda + p)]) *
             double(b[static_cast<size_t>(tb ? j * ldb + p : p * ldb + j)]);
      }
      c[static_cast<size_t>(i * ldc + j)] = alpha * s + beta * double(c0[static_cast<size_t>(i * ldc + j)]);
    }
  }
  return c;
}

TEST(OneDnnMatmuls, VaryingShapesShareOnePrimitivePerLayout) {
  SKIP_UNLESS_ONEDNN();
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);  // unsliced: each call is one problem
  // Views into fixed buffers (the leading dimensions stay put, as a grouped GEMM's row blocks do); m and k change.
  const int64_t m_max = 70, k_max = 40, n = 24;
  const struct {
    int64_t m, k;
  } sizes[] = {{1, 1}, {7, 40}, {70, 3}, {33, 17}, {64, 40}, {2, 39}};
  const auto a = test::random_floats(static_cast<size_t>(m_max * k_max), 1);
  const auto b = test::random_floats(static_cast<size_t>(k_max * n), 2);
  const auto c0 = test::random_floats(static_cast<size_t>(m_max * n), 3);
  const bool bf16 = onednn_bf16_supported();
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      OneDnnMatmuls matmuls;
      const GemmLibrary library{GemmBackend::kOneDnn, &matmuls, GemmShape::kVarying};
      const int64_t lda = ta ? m_max : k_max, ldb = tb ? k_max : n;
      for (const auto& s : sizes) {
        const std::string what = "m " + std::to_string(s.m) + ", k " + std::to_string(s.k) + ", trans_a " +
                                 std::to_string(ta) + ", trans_b " + std::to_string(tb);
        std::vector<float> c = c0;
        gemm(ta, tb, s.m, n, s.k, 0.75f, a.data(), lda, b.data(), ldb, 0.5f, c.data(), n, GemmSlicing::kPerThread,
             library);
        const auto want = reference(ta, tb, s.m, n, s.k, 0.75f, a, lda, b, ldb, 0.5f, c0, n);
        test::expect_close(c.data(), want.data(), static_cast<size_t>(s.m * n), 1e-4, 1e-5, what);
        if (bf16) {
          const auto a16 = test::narrowed(a), b16 = test::narrowed(b);
          std::vector<float> c16 = c0;
          gemm_bf16(library, ta, tb, s.m, n, s.k, 0.75f, a16.data(), lda, b16.data(), ldb, 0.5f,
                    Bf16GemmOut{c16.data(), nullptr}, n, GemmSlicing::kPerThread);
          const auto want16 = reference(ta, tb, s.m, n, s.k, 0.75f, test::widened(a16), lda, test::widened(b16), ldb,
                                        0.5f, c0, n);
          test::expect_close(c16.data(), want16.data(), static_cast<size_t>(s.m * n), 1e-4, 1e-5, what + " bf16");
        }
      }
      EXPECT_EQ(matmuls.primitives(), bf16 ? 2u : 1u)
          << "trans_a " << ta << ", trans_b " << tb << ": a primitive per dtype, whatever m and k";
    }
  }
  omp_set_num_threads(saved);
}

TEST(OneDnnMatmuls, OneDnnWithoutItsStateIsRefused) {
  SKIP_UNLESS_ONEDNN();
  std::vector<float> a(4, 1.0f), c(4);
  try {
    gemm(false, false, 2, 2, 2, 1.0f, a.data(), 2, a.data(), 2, 0.0f, c.data(), 2, GemmSlicing::kPerThread,
         {GemmBackend::kOneDnn});
    FAIL() << "a oneDNN GEMM without its state ran";
  } catch (const std::exception& e) {  // an internal error: a caller bug, not user input
    EXPECT_NE(std::string(e.what()).find("OneDnnMatmuls"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cleave::kernels::cpu::onednn_matmuls_test
