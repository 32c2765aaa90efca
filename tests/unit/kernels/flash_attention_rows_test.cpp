// The flash kernel's element-wise block work (kernels/cpu/flash_attention_rows.hpp): every instruction-set path
// gives the baseline's bits, on blocks whose masks cut rows at every offset (vector tails on each path), and the
// baseline matches a double-precision softmax update and dot product.
#include "kernels/cpu/flash_attention_rows.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernel_test_util.hpp"
#include "support/isa_paths.hpp"

namespace cleave::kernels::cpu::flash_attention_rows_test {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// A causal block with a window whose rows see from 0 up to every column count, and start past the first keys.
FlashAttentionShape masked_shape(int64_t len) {
  FlashAttentionShape s;
  s.batch = 1;
  s.q_len = s.kv_len = len;
  s.q_heads = s.kv_heads = 1;
  s.head_dim = 24;
  s.window = 40;
  return s;
}

struct RowOutputs {
  std::vector<float> S, m, l, acc, P, dS, D;
};

// Every op on the same inputs through isa: blk covers rows 0..rows-1 against keys [kb, kb + cols).
RowOutputs run_ops(VectorIsa isa, const FlashAttentionShape& s, const flash_rows::BlockRows& blk, uint64_t seed,
                   bool ln2_shift = false) {
  const int64_t n = blk.rows * blk.ld, hd = s.head_dim;
  RowOutputs o;
  o.S = test::random_floats(static_cast<size_t>(n), seed, 4.0f);
  o.m = test::random_floats(static_cast<size_t>(blk.rows), seed + 1);
  o.m[0] = kNegInf;  // a row seen for the first time
  o.l = test::random_floats(o.m.size(), seed + 2);
  o.acc = test::random_floats(static_cast<size_t>(blk.rows * hd), seed + 3);
  flash_rows::softmax_update(isa, s, blk, o.S.data(), o.m.data(), o.l.data(), o.acc.data(), hd, ln2_shift);
  auto lse = test::random_floats(o.m.size(), seed + 4);
  lse[1] = kNegInf;  // a row that sees no key
  o.P = test::random_floats(static_cast<size_t>(n), seed + 5, 4.0f);
  flash_rows::probabilities(isa, s, blk, lse.data(), o.P.data());
  o.dS = test::random_floats(static_cast<size_t>(n), seed + 6);
  const auto D = test::random_floats(o.m.size(), seed + 7);
  flash_rows::scores_grad(isa, o.P.data(), D.data(), blk.rows, blk.cols, blk.ld, 0.125f, o.dS.data());
  const auto x = test::random_floats(static_cast<size_t>(blk.rows * hd), seed + 8);
  const auto y = test::random_floats(x.size(), seed + 9);
  o.D.assign(o.m.size(), 0.0f);
  flash_rows::output_dots(isa, x.data(), hd, y.data(), hd, blk.rows, hd, o.D.data());
  return o;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(FlashAttentionRows, EveryIsaPathGivesTheSameBits) {
  const FlashAttentionShape s = masked_shape(200);
  for (int64_t cols : {1, 7, 16, 33, 128}) {
    // Rows at positions 60.. see keys [pos - 39, pos + 1): against block [kb, kb + cols) every cut point appears.
    const flash_rows::BlockRows blk{60, 45, 40, cols, cols + 3};
    for (bool shift : {false, true}) {
    const RowOutputs base = run_ops(VectorIsa::kBaseline, s, blk, 11, shift);
    test::for_each_isa_path(test::kIsaPathsPastBaseline, [&](VectorIsa isa) {
      const RowOutputs o = run_ops(isa, s, blk, 11, shift);
      const char* names[] = {"S", "m", "l", "acc", "P", "dS", "D"};
      const std::vector<float>* got[] = {&o.S, &o.m, &o.l, &o.acc, &o.P, &o.dS, &o.D};
      const std::vector<float>* want[] = {&base.S, &base.m, &base.l, &base.acc, &base.P, &base.dS, &base.D};
      for (int i = 0; i < 7; ++i) {
        EXPECT_TRUE(same_bits(*got[i], *want[i]))
            << names[i] << ", " << test::isa_label(isa) << ", cols " << cols << ", ln2 shift " << shift;
      }
    });
    }
  }
}

// ln2_shift (the kernels that round P): the new m is the row's maximum rounded to the nearest multiple of ln 2 (so P
// is at most sqrt(2)), a second update whose block holds nothing larger keeps it (alpha exactly 1, acc untouched),
// and S, l are the update's with that shift.
TEST(FlashAttentionRows, Ln2ShiftIsTheMaximumRoundedToAMultipleOfLn2) {
  const FlashAttentionShape s = masked_shape(200);
  const flash_rows::BlockRows blk{60, 45, 40, 33, 36};
  const RowOutputs o = run_ops(best_vector_isa(), s, blk, 11, true);
  const auto S = test::random_floats(static_cast<size_t>(blk.rows * blk.ld), 11, 4.0f);
  auto m = test::random_floats(static_cast<size_t>(blk.rows), 12);
  m[0] = kNegInf;
  const auto l = test::random_floats(m.size(), 13);
  const double ln2 = std::log(2.0);
  int checked = 0;
  for (int64_t r = 0; r < blk.rows; ++r) {
    const int64_t pi = blk.p_first + r;
    const int64_t a = std::clamp<int64_t>(flash_rows::key_lo(s, pi) - blk.kb, 0, blk.cols);
    const int64_t e = std::clamp<int64_t>(flash_rows::key_hi(s, pi) - blk.kb, 0, blk.cols);
    if (a >= e) continue;
    double mx = m[r];
    for (int64_t j = a; j < e; ++j) mx = std::max<double>(mx, S[r * blk.ld + j]);
    const double shift = std::nearbyint(mx / ln2) * ln2;
    EXPECT_NEAR(o.m[r], shift, 1e-6 * (1 + std::abs(shift))) << "row " << r;
    double sum = 0;
    for (int64_t j = a; j < e; ++j) {
      const double p = std::exp(S[r * blk.ld + j] - shift);
      sum += p;
      EXPECT_LE(o.S[r * blk.ld + j], std::sqrt(2.0) * (1 + 1e-6)) << "row " << r << " col " << j;
      EXPECT_NEAR(o.S[r * blk.ld + j], p, 2e-6 * (1 + p)) << "row " << r << " col " << j;
    }
    const double alpha = m[r] == kNegInf ? 0.0 : std::exp(m[r] - shift);
    EXPECT_NEAR(o.l[r], l[r] * alpha + sum, 1e-5 * (l[r] * alpha + sum)) << "row " << r;
    ++checked;
  }
  EXPECT_GT(checked, 20);
  // Again with scores all below the shift: m stays, alpha is exactly 1, acc keeps its bits.
  auto m2 = o.m, l2 = o.l, acc2 = o.acc;
  std::vector<float> S2(static_cast<size_t>(blk.rows * blk.ld), -50.0f);
  flash_rows::softmax_update(best_vector_isa(), s, blk, S2.data(), m2.data(), l2.data(), acc2.data(), s.head_dim,
                             true);
  EXPECT_TRUE(same_bits(m2, o.m));
  EXPECT_TRUE(same_bits(acc2, o.acc));
}

// Short causal rows (T 64: every row ends in a partial vector, of every length): on every path the softmax update's
// row sum is the documented order exactly (element i into lane i mod 16 from +0, lanes added 0 to 15; the row's first
// block, so l = l * 0 + sum), the masked keys are exact +0, and neither op writes past its block's columns (the
// padding up to the row stride keeps its bits: the tails are masked vector stores).
float lane_order_sum(const float* p, int64_t n) {
  float lane[16] = {};
  for (int64_t i = 0; i < n; ++i) lane[i % 16] += p[i];
  float t = 0.0f;
  for (float x : lane) t += x;
  return t;
}

TEST(FlashAttentionRows, ShortRowsSumInLaneOrderAndWriteOnlyTheirColumns) {
  FlashAttentionShape s = masked_shape(80);
  s.window = 0;
  const flash_rows::BlockRows blk{0, 70, 0, 60, 67};  // row r sees keys [0, min(r + 1, 60)): tails to the edge
  int checked = 0;
  for (VectorIsa isa : {VectorIsa::kBaseline, VectorIsa::kAvx2, VectorIsa::kAvx512}) {
    if (!vector_isa_available(isa)) continue;
    const auto S0 = test::random_floats(static_cast<size_t>(blk.rows * blk.ld), 41, 4.0f);
    auto S = S0, P = S0;
    std::vector<float> m(static_cast<size_t>(blk.rows), kNegInf);
    auto l = test::random_floats(m.size(), 42);
    auto acc = test::random_floats(static_cast<size_t>(blk.rows * s.head_dim), 43);
    flash_rows::softmax_update(isa, s, blk, S.data(), m.data(), l.data(), acc.data(), s.head_dim);
    const auto lse = test::random_floats(m.size(), 44);
    flash_rows::probabilities(isa, s, blk, lse.data(), P.data());
    for (int64_t r = 0; r < blk.rows; ++r) {
      const int64_t e = std::min<int64_t>(r + 1, blk.cols);
      const float* srow = S.data() + r * blk.ld;
      const float* prow = P.data() + r * blk.ld;
      const float want = lane_order_sum(srow, e);
      EXPECT_EQ(std::memcmp(&l[r], &want, sizeof want), 0) << "isa " << static_cast<int>(isa) << " row " << r
                                                            << ": l " << l[r] << ", lane order " << want;
      for (int64_t j = 0; j < blk.ld; ++j) {
        const size_t at = static_cast<size_t>(r * blk.ld + j);
        if (j < e) {
          EXPECT_GT(srow[j], 0.0f) << "row " << r << " col " << j;
          EXPECT_GT(prow[j], 0.0f) << "row " << r << " col " << j;
        } else if (j < blk.cols) {
          EXPECT_TRUE(srow[j] == 0.0f && !std::signbit(srow[j])) << "row " << r << " col " << j;
          EXPECT_TRUE(prow[j] == 0.0f && !std::signbit(prow[j])) << "row " << r << " col " << j;
        } else {
          EXPECT_EQ(std::memcmp(&S[at], &S0[at], sizeof(float)), 0) << "softmax wrote padding row " << r;
          EXPECT_EQ(std::memcmp(&P[at], &S0[at], sizeof(float)), 0) << "probabilities wrote padding row " << r;
        }
      }
      ++checked;
    }
  }
  EXPECT_GE(checked, 70);
}

TEST(FlashAttentionRows, SoftmaxUpdateMatchesDoubleReference) {
  const FlashAttentionShape s = masked_shape(200);
  const flash_rows::BlockRows blk{60, 45, 40, 33, 36};
  const RowOutputs o = run_ops(best_vector_isa(), s, blk, 11);
  const auto S = test::random_floats(static_cast<size_t>(blk.rows * blk.ld), 11, 4.0f);
  auto m = test::random_floats(static_cast<size_t>(blk.rows), 12);
  m[0] = kNegInf;
  const auto l = test::random_floats(m.size(), 13);
  int checked = 0;
  for (int64_t r = 0; r < blk.rows; ++r) {
    const int64_t pi = blk.p_first + r;
    const int64_t a = std::clamp<int64_t>(flash_rows::key_lo(s, pi) - blk.kb, 0, blk.cols);
    const int64_t e = std::clamp<int64_t>(flash_rows::key_hi(s, pi) - blk.kb, 0, blk.cols);
    double mx = m[r];
    for (int64_t j = a; j < e; ++j) mx = std::max<double>(mx, S[r * blk.ld + j]);
    double sum = 0;
    for (int64_t j = 0; j < blk.cols; ++j) {
      const double p = (j >= a && j < e) ? std::exp(S[r * blk.ld + j] - mx) : 0.0;
      sum += p;
      EXPECT_NEAR(o.S[r * blk.ld + j], p, 1e-6 * (1 + p)) << "row " << r << " col " << j;
    }
    if (a >= e) continue;
    const double alpha = m[r] == kNegInf ? 0.0 : std::exp(m[r] - mx);
    EXPECT_NEAR(o.l[r], l[r] * alpha + sum, 1e-5 * (l[r] * alpha + sum)) << "row " << r;
    EXPECT_EQ(o.m[r], static_cast<float>(mx)) << "row " << r;
    ++checked;
  }
  EXPECT_GT(checked, 20);
  const auto x = test::random_floats(static_cast<size_t>(blk.rows * s.head_dim), 19);
  const auto y = test::random_floats(x.size(), 20);
  for (int64_t r = 0; r < blk.rows; ++r) {
    double dot = 0;
    for (int64_t d = 0; d < s.head_dim; ++d) dot += double{x[r * s.head_dim + d]} * y[r * s.head_dim + d];
    EXPECT_NEAR(o.D[r], dot, 1e-5) << "row " << r;
  }
}

}  // namespace
}  // namespace cleave::kernels::cpu::flash_attention_rows_test
