// The bf16 flash kernel's score products (kernels/cpu/flash_attention_dots.hpp): every path (the FMA paths and
// AVX-512 BF16's vdpbf16ps where the CPU has it) gives the baseline's bits, and the baseline matches a double dot
// product of the bf16 values, on head dims with and without a pad (odd), rows and columns off the tile edges, strided
// operands; the pad columns of S are never written. The value products likewise: C += A B with A f32 rounded to bf16
// as it is packed (rows, or columns of its transpose; zeros and subnormals to +0) and B bf16 rows, on odd contraction
// lengths, against a double sum of the rounded values added to C's old values. Operands span 11 binades, so that the
// f32 sums of bf16 x bf16 products round and a path's order change shows.
#include "kernels/cpu/flash_attention_dots.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/core/dtype.hpp"
#include "kernel_test_util.hpp"
#include "kernels/cpu/flash_attention_rows.hpp"
#include "kernels/cpu/vector_isa.hpp"

namespace cleave::kernels::cpu::flash_attention_dots_test {
namespace {

using flash_dots::DotIsa;

std::vector<float> run_scores(DotIsa isa, const std::vector<uint16_t>& a, int64_t lda, int64_t rows,
                              const std::vector<uint16_t>& b, int64_t ldb, int64_t cols, int64_t hd, int64_t ld_s) {
  std::vector<float> a_rows(static_cast<size_t>(flash_dots::rows_floats(rows, hd)), std::nanf(""));
  std::vector<float> b_pairs(static_cast<size_t>(flash_dots::pairs_floats(cols, hd)), std::nanf(""));
  flash_dots::pack_rows(isa, a.data(), lda, rows, hd, a_rows.data());
  flash_dots::pack_pairs(b.data(), ldb, cols, hd, b_pairs.data());
  std::vector<float> S(static_cast<size_t>(rows * ld_s), 7.0f);
  flash_dots::scores(isa, a_rows.data(), rows, b_pairs.data(), cols, hd, 0.125f, S.data(), ld_s);
  return S;
}

TEST(FlashAttentionDots, EveryPathGivesTheSameBitsAndTheDoubleProducts) {
  int checked_paths = 0;
  for (int64_t hd : {1, 6, 7, 64}) {
    for (int64_t rows : {1, 5, 13, 64}) {
      for (int64_t cols : {1, 17, 33, 128}) {
        const int64_t lda = hd + 3, ldb = hd + 5, ld_s = cols + 2;
        // Over 11 binades: bf16 x bf16 products of one binade's values mostly add exactly in f32, and then a path
        // that added them in another order would pass (checked by swapping the odd and even products' adds).
        const auto a = test::random_bf16_spanning_binades(static_cast<size_t>(rows * lda), 31 + hd, 11, 2.0f);
        const auto b = test::random_bf16_spanning_binades(static_cast<size_t>(cols * ldb), 32 + hd, 11, 2.0f);
        const std::string at = "hd " + std::to_string(hd) + " rows " + std::to_string(rows) + " cols " +
                               std::to_string(cols);
        const auto base = run_scores(DotIsa::kBaseline, a, lda, rows, b, ldb, cols, hd, ld_s);
        double norm = 0.0;
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c < ld_s; ++c) {
            const float got = base[r * ld_s + c];
            if (c >= cols) {
              EXPECT_EQ(got, 7.0f) << at << ": pad column " << c << " written";
              continue;
            }
            double dot = 0.0;
            for (int64_t d = 0; d < hd; ++d) {
              dot += double{bf16_to_float(a[r * lda + d])} * bf16_to_float(b[c * ldb + d]);
            }
            // f32 sums of hd exact products: |error| <= hd * 2^-24 * sum |products| (< 4 hd per term here).
            EXPECT_NEAR(got, 0.125 * dot, 0.125 * hd * hd * 4 * 6e-8 + 1e-30) << at << " at " << r << ", " << c;
            norm += dot * dot;
          }
        }
        EXPECT_GT(norm, 0.0) << at;
        for (DotIsa isa : {DotIsa::kAvx2, DotIsa::kAvx512, DotIsa::kAvx512Bf16}) {
          if (!flash_dots::dot_isa_available(isa)) continue;
          ++checked_paths;
          EXPECT_TRUE(test::same_bits(run_scores(isa, a, lda, rows, b, ldb, cols, hd, ld_s), base))
              << at << ", path " << static_cast<int>(isa);
        }
      }
    }
  }
  RecordProperty("checked_paths", checked_paths);
}

// C [rows, n] (row stride ld_c, starting at 0.5) += round(A) B for A [rows, k] (transposed: stored [k, rows]) and
// B [k, n] (row stride ldb) on one path.
std::vector<float> run_products(DotIsa isa, const std::vector<float>& a, bool transposed, int64_t rows, int64_t k,
                                const std::vector<uint16_t>& b, int64_t ldb, int64_t n, int64_t ld_c) {
  std::vector<float> a_rows(static_cast<size_t>(flash_dots::rounded_floats(rows, k)), std::nanf(""));
  std::vector<float> b_pairs(static_cast<size_t>(flash_dots::pairs_floats(n, k)), std::nanf(""));
  const flash_dots::Lhs lhs = transposed
                                  ? flash_dots::pack_columns_rounded(isa, a.data(), rows + 1, k, rows, a_rows.data())
                                  : flash_dots::pack_rows_rounded(isa, a.data(), k + 3, rows, k, a_rows.data());
  flash_dots::pack_pairs_of_rows(isa, b.data(), ldb, k, n, b_pairs.data());
  std::vector<float> C(static_cast<size_t>(rows * ld_c), 0.5f);
  flash_dots::products(isa, lhs, rows, b_pairs.data(), n, k, C.data(), ld_c);
  return C;
}

TEST(FlashAttentionDots, ValueProductsRoundTheLeftOperandAndGiveTheSameBitsOnEveryPath) {
  int checked_paths = 0;
  for (bool transposed : {false, true}) {
    for (int64_t k : {1, 17, 64, 128}) {
      for (int64_t rows : {1, 5, 13, 64}) {
        for (int64_t n : {6, 7, 64}) {
          const int64_t lda = transposed ? rows + 1 : k + 3, ldb = n + 5, ld_c = n + 2;
          const int64_t a_rows = transposed ? k : rows;
          // Both operands over 11 binades, so that the products' f32 sums round (as the scores' above).
          auto a = test::random_floats_spanning_binades(static_cast<size_t>(a_rows * lda), 41 + k, 11);
          if (rows * k > 2) {  // subnormals: read as +0
            a[0] = 3e-39f;
            a[1] = -2.5e-39f;
          }
          const auto b = test::random_bf16_spanning_binades(static_cast<size_t>(k * ldb), 42 + n, 11, 2.0f);
          const std::string at = std::string(transposed ? "transposed" : "rows") + " k " + std::to_string(k) +
                                 " rows " + std::to_string(rows) + " n " + std::to_string(n);
          const auto base = run_products(DotIsa::kBaseline, a, transposed, rows, k, b, ldb, n, ld_c);
          double norm = 0.0;
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t c = 0; c < ld_c; ++c) {
              const float got = base[r * ld_c + c];
              if (c >= n) {
                EXPECT_EQ(got, 0.5f) << at << ": pad column " << c << " written";
                continue;
              }
              double dot = 0.0, mag = 0.0;
              for (int64_t i = 0; i < k; ++i) {
                const float x = transposed ? a[i * lda + r] : a[r * lda + i];
                const double xr = std::fabs(x) < 1.2e-38f ? 0.0 : bf16_to_float(float_to_bf16(x));
                dot += xr * bf16_to_float(b[i * ldb + c]);
                mag += std::fabs(xr * bf16_to_float(b[i * ldb + c]));
              }
              // f32 sums of k exact products, then added to 0.5: |error| <= (k + 1) 2^-24 (sum |products| + 0.5).
              EXPECT_NEAR(got, 0.5 + dot, (k + 1) * 6e-8 * (mag + 0.5)) << at << " at " << r << ", " << c;
              norm += dot * dot;
            }
          }
          EXPECT_GT(norm, 0.0) << at;
          for (DotIsa isa : {DotIsa::kAvx2, DotIsa::kAvx512, DotIsa::kAvx512Bf16}) {
            if (!flash_dots::dot_isa_available(isa)) continue;
            ++checked_paths;
            EXPECT_TRUE(test::same_bits(run_products(isa, a, transposed, rows, k, b, ldb, n, ld_c), base))
                << at << ", path " << static_cast<int>(isa);
          }
        }
      }
    }
  }
  RecordProperty("checked_paths", checked_paths);
}

// The GEMM value path's fused pass: dS as flash_rows::scores_grad gives it, then P and dS rounded as round_in_place
// rounds them (checked against bf16 values below: low halves zero), on every available path, off the vector edges;
// the columns past cols untouched.
TEST(FlashAttentionDots, ScoresGradRoundedIsScoresGradThenRounding) {
  const int64_t rows = 5, cols = 37, ld = 40;
  const auto P0 = test::random_floats(static_cast<size_t>(rows * ld), 61);
  const auto dP0 = test::random_floats(static_cast<size_t>(rows * ld), 62);
  const std::vector<float> D = {0.25f, -0.5f, 0.0f, 1.5f, -2.0f};
  std::vector<float> want_p = P0, want_ds = dP0;
  flash_rows::scores_grad(VectorIsa::kBaseline, want_p.data(), D.data(), rows, cols, ld, 0.125f, want_ds.data());
  flash_dots::round_in_place(DotIsa::kBaseline, want_p.data(), ld, rows, cols);
  flash_dots::round_in_place(DotIsa::kBaseline, want_ds.data(), ld, rows, cols);
  for (int64_t i = 0; i < rows * cols; ++i) {
    const float x = want_ds[(i / cols) * ld + i % cols];
    ASSERT_EQ(__builtin_bit_cast(uint32_t, x) & 0xffffu, 0u) << i;
    ASSERT_EQ(bf16_to_float(float_to_bf16(x)), x) << i;
  }
  for (DotIsa isa : {DotIsa::kBaseline, DotIsa::kAvx2, DotIsa::kAvx512, DotIsa::kAvx512Bf16}) {
    if (!flash_dots::dot_isa_available(isa)) continue;
    std::vector<float> p = P0, ds = dP0;
    flash_dots::scores_grad_rounded(isa, p.data(), D.data(), rows, cols, ld, 0.125f, ds.data());
    EXPECT_TRUE(test::same_bits(p, want_p)) << static_cast<int>(isa);
    EXPECT_TRUE(test::same_bits(ds, want_ds)) << static_cast<int>(isa);
  }
}

TEST(FlashAttentionDots, BestPathIsAvailable) {
  EXPECT_TRUE(flash_dots::dot_isa_available(flash_dots::best_dot_isa()));
  EXPECT_TRUE(flash_dots::dot_isa_available(DotIsa::kBaseline));
}

}  // namespace
}  // namespace cleave::kernels::cpu::flash_attention_dots_test
