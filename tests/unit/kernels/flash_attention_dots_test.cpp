// The bf16 flash kernel's score products (kernels/cpu/flash_attention_dots.hpp): every path (the FMA paths and
// AVX-512 BF16's vdpbf16ps where the CPU has it) gives the baseline's bits, and the baseline matches a double dot
// product of the bf16 values, on head dims with and without a pad (odd), rows and columns off the tile edges, strided
// operands; the pad columns of S are never written.
#include "kernels/cpu/flash_attention_dots.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/core/dtype.hpp"
#include "kernel_test_util.hpp"

namespace cleave::kernels::cpu {
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
        const auto a = test::random_bf16(static_cast<size_t>(rows * lda), 31 + hd, 2.0f);
        const auto b = test::random_bf16(static_cast<size_t>(cols * ldb), 32 + hd, 2.0f);
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

TEST(FlashAttentionDots, BestPathIsAvailable) {
  EXPECT_TRUE(flash_dots::dot_isa_available(flash_dots::best_dot_isa()));
  EXPECT_TRUE(flash_dots::dot_isa_available(DotIsa::kBaseline));
}

}  // namespace
}  // namespace cleave::kernels::cpu
