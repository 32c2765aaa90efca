// The bf16 flash kernel's value-product operands (see flash_attention_dots.hpp): f32 P and dS rounded to bf16 as
// rows or as pairs of rows (their transposes without a transpose) or in place (the GEMM path), and bf16 blocks as
// pairs of rows. Integer work only, compiled per vector width: every path gives the same bits.
#include "kernels/cpu/flash_attention_dots.hpp"

#include <cstdint>

namespace cleave::kernels::cpu::flash_dots {
namespace {

// x as the dot path reads it: float_to_bf16 (nearest even, a NaN kept as a quiet NaN), and +0 for zeros and
// subnormals (vdpbf16ps reads a subnormal input as zero; flushing here gives every path the same products).
[[gnu::always_inline]] inline std::uint32_t operand_bits(float x) {
  const std::uint32_t bits = __builtin_bit_cast(std::uint32_t, x);
  const std::uint32_t nan = (bits & 0x7fffffffu) > 0x7f800000u ? ~0u : 0u;
  const std::uint32_t tiny = (bits & 0x7f800000u) == 0u ? ~0u : 0u;
  const std::uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  return (((bits >> 16) | 0x40u) & nan) | (rounded & ~nan & ~tiny);
}

// Rows [rows, k] of a (row stride ld) rounded: bf16 (kWords: two to a 32-bit word) or widened f32, row stride kp.
template <bool kBf16>
[[gnu::always_inline]] inline void round_rows(const float* a, int64_t ld, int64_t rows, int64_t k, int64_t kp,
                                              float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = a + r * ld;
    if constexpr (kBf16) {
      auto* o = reinterpret_cast<std::uint16_t*>(out) + r * kp;
#pragma omp simd
      for (int64_t i = 0; i < k; ++i) o[i] = static_cast<std::uint16_t>(operand_bits(x[i]));
      if (kp > k) o[k] = 0;
    } else {
      auto* o = reinterpret_cast<std::uint32_t*>(out) + r * kp;
#pragma omp simd
      for (int64_t i = 0; i < k; ++i) o[i] = operand_bits(x[i]) << 16;
      if (kp > k) o[k] = 0;
    }
  }
}

// Pairs of a's rows (a [k, n], row stride ld) rounded: pair p of column c (rows 2p and 2p + 1, the odd k's last pair
// padded with zero) at pair index p * n + c; bf16 as one 32-bit word, f32 as two floats.
template <bool kBf16>
[[gnu::always_inline]] inline void round_row_pairs(const float* a, int64_t ld, int64_t k, int64_t n, float* out) {
  for (int64_t p = 0; p < (k + 1) / 2; ++p) {
    const float* x0 = a + 2 * p * ld;
    const float* x1 = 2 * p + 1 < k ? x0 + ld : nullptr;
    if constexpr (kBf16) {
      auto* o = reinterpret_cast<std::uint32_t*>(out) + p * n;
      if (x1 != nullptr) {
#pragma omp simd
        for (int64_t c = 0; c < n; ++c) o[c] = operand_bits(x0[c]) | operand_bits(x1[c]) << 16;
      } else {
#pragma omp simd
        for (int64_t c = 0; c < n; ++c) o[c] = operand_bits(x0[c]);
      }
    } else {
      auto* o = reinterpret_cast<std::uint32_t*>(out) + 2 * p * n;
      if (x1 != nullptr) {
#pragma omp simd
        for (int64_t c = 0; c < n; ++c) {
          o[2 * c] = operand_bits(x0[c]) << 16;
          o[2 * c + 1] = operand_bits(x1[c]) << 16;
        }
      } else {
#pragma omp simd
        for (int64_t c = 0; c < n; ++c) {
          o[2 * c] = operand_bits(x0[c]) << 16;
          o[2 * c + 1] = 0;
        }
      }
    }
  }
}

// Rows of a rounded in place (kept in f32).
[[gnu::always_inline]] inline void round_rows_in_place(float* a, int64_t ld, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    auto* x = reinterpret_cast<std::uint32_t*>(a + r * ld);
#pragma omp simd
    for (int64_t i = 0; i < cols; ++i) x[i] = operand_bits(__builtin_bit_cast(float, x[i])) << 16;
  }
}

// dS = P (dP - D) scale row by row as flash_rows::scores_grad computes it (element-wise, no contraction: the same
// bits at every width), then P and dS rounded in place, in one pass.
[[gnu::always_inline]] inline void grad_rounded(float* P, const float* D, int64_t rows, int64_t cols, int64_t ld,
                                                float scale, float* dP) {
  for (int64_t r = 0; r < rows; ++r) {
    float* p = P + r * ld;
    float* ds = dP + r * ld;
    const float Di = D[r];
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) {
      const float x = p[j], g = x * (ds[j] - Di) * scale;
      p[j] = __builtin_bit_cast(float, operand_bits(x) << 16);
      ds[j] = __builtin_bit_cast(float, operand_bits(g) << 16);
    }
  }
}

__attribute__((optimize("fp-contract=off"))) void grad_rounded_baseline(float* P, const float* D, int64_t rows,
                                                                        int64_t cols, int64_t ld, float scale,
                                                                        float* dP) {
  grad_rounded(P, D, rows, cols, ld, scale, dP);
}

void round_rows_baseline(const float* a, int64_t ld, int64_t rows, int64_t k, float* out) {
  round_rows<false>(a, ld, rows, k, pair_dim(k), out);
}
void round_row_pairs_baseline(const float* a, int64_t ld, int64_t k, int64_t n, float* out) {
  round_row_pairs<false>(a, ld, k, n, out);
}
#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) void round_rows_avx2(const float* a, int64_t ld, int64_t rows, int64_t k,
                                                          float* out) {
  round_rows<false>(a, ld, rows, k, pair_dim(k), out);
}
__attribute__((target("avx2,fma"))) void round_row_pairs_avx2(const float* a, int64_t ld, int64_t k, int64_t n,
                                                              float* out) {
  round_row_pairs<false>(a, ld, k, n, out);
}
__attribute__((target("avx512f,avx512bw"))) void round_rows_avx512(const float* a, int64_t ld, int64_t rows,
                                                                   int64_t k, float* out) {
  round_rows<false>(a, ld, rows, k, pair_dim(k), out);
}
__attribute__((target("avx512f,avx512bw"))) void round_row_pairs_avx512(const float* a, int64_t ld, int64_t k,
                                                                        int64_t n, float* out) {
  round_row_pairs<false>(a, ld, k, n, out);
}
__attribute__((target("avx512f,avx512bw"))) void round_rows_avx512_bf16(const float* a, int64_t ld, int64_t rows,
                                                                        int64_t k, float* out) {
  round_rows<true>(a, ld, rows, k, pair_dim(k), out);
}
__attribute__((target("avx512f,avx512bw"))) void round_row_pairs_avx512_bf16(const float* a, int64_t ld, int64_t k,
                                                                             int64_t n, float* out) {
  round_row_pairs<true>(a, ld, k, n, out);
}
__attribute__((target("avx2"), optimize("fp-contract=off"))) void grad_rounded_avx2(float* P, const float* D,
                                                                                   int64_t rows, int64_t cols,
                                                                                   int64_t ld, float scale,
                                                                                   float* dP) {
  grad_rounded(P, D, rows, cols, ld, scale, dP);
}
__attribute__((target("avx512f,avx512bw"), optimize("fp-contract=off"))) void grad_rounded_avx512(
    float* P, const float* D, int64_t rows, int64_t cols, int64_t ld, float scale, float* dP) {
  grad_rounded(P, D, rows, cols, ld, scale, dP);
}
__attribute__((target("avx2,fma"))) void round_in_place_avx2(float* a, int64_t ld, int64_t rows, int64_t cols) {
  round_rows_in_place(a, ld, rows, cols);
}
__attribute__((target("avx512f,avx512bw"))) void round_in_place_avx512(float* a, int64_t ld, int64_t rows,
                                                                       int64_t cols) {
  round_rows_in_place(a, ld, rows, cols);
}
#endif

// pack_pairs_of_rows: integer moves, the same bits whatever the target (a template, so each target compiles its own).
template <class>
[[gnu::always_inline]] inline void pairs_of_rows(const std::uint16_t* b, int64_t ld, int64_t k, int64_t n,
                                                 float* out) {
  const int64_t cp = padded_cols(n);
  auto* o = reinterpret_cast<std::uint32_t*>(out);
  for (int64_t p = 0; p < (k + 1) / 2; ++p) {
    const std::uint16_t* x0 = b + 2 * p * ld;
    std::uint32_t* row = o + p * cp;
    if (2 * p + 1 < k) {
      const std::uint16_t* x1 = x0 + ld;
#pragma omp simd
      for (int64_t c = 0; c < n; ++c) row[c] = std::uint32_t{x0[c]} | std::uint32_t{x1[c]} << 16;
    } else {
#pragma omp simd
      for (int64_t c = 0; c < n; ++c) row[c] = x0[c];
    }
    for (int64_t c = n; c < cp; ++c) row[c] = 0;
  }
}
#if defined(__x86_64__)
__attribute__((target("avx512f,avx512bw"))) void pairs_of_rows_avx512(const std::uint16_t* b, int64_t ld, int64_t k,
                                                                      int64_t n, float* out) {
  pairs_of_rows<void>(b, ld, k, n, out);
}
#endif

}  // namespace

Lhs pack_rows_rounded(DotIsa isa, const float* a, int64_t ld, int64_t rows, int64_t k, float* out) {
#if defined(__x86_64__)
  switch (isa) {
    case DotIsa::kAvx512Bf16: round_rows_avx512_bf16(a, ld, rows, k, out); break;
    case DotIsa::kAvx512: round_rows_avx512(a, ld, rows, k, out); break;
    case DotIsa::kAvx2: round_rows_avx2(a, ld, rows, k, out); break;
    case DotIsa::kBaseline: round_rows_baseline(a, ld, rows, k, out); break;
  }
#else
  round_rows_baseline(a, ld, rows, k, out);
#endif
  return {out, pair_dim(k) / 2, 1};
}

Lhs pack_columns_rounded(DotIsa isa, const float* a, int64_t ld, int64_t k, int64_t cols, float* out) {
#if defined(__x86_64__)
  switch (isa) {
    case DotIsa::kAvx512Bf16: round_row_pairs_avx512_bf16(a, ld, k, cols, out); break;
    case DotIsa::kAvx512: round_row_pairs_avx512(a, ld, k, cols, out); break;
    case DotIsa::kAvx2: round_row_pairs_avx2(a, ld, k, cols, out); break;
    case DotIsa::kBaseline: round_row_pairs_baseline(a, ld, k, cols, out); break;
  }
#else
  round_row_pairs_baseline(a, ld, k, cols, out);
#endif
  return {out, 1, cols};
}

void pack_pairs_of_rows(DotIsa isa, const std::uint16_t* b, int64_t ld, int64_t k, int64_t n, float* out) {
#if defined(__x86_64__)
  if (isa == DotIsa::kAvx512Bf16 || isa == DotIsa::kAvx512) return pairs_of_rows_avx512(b, ld, k, n, out);
#endif
  pairs_of_rows<void>(b, ld, k, n, out);
}

void round_in_place(DotIsa isa, float* a, int64_t ld, int64_t rows, int64_t cols) {
#if defined(__x86_64__)
  if (isa == DotIsa::kAvx512Bf16 || isa == DotIsa::kAvx512) return round_in_place_avx512(a, ld, rows, cols);
  if (isa == DotIsa::kAvx2) return round_in_place_avx2(a, ld, rows, cols);
#endif
  round_rows_in_place(a, ld, rows, cols);
}

void scores_grad_rounded(DotIsa isa, float* P, const float* D, int64_t rows, int64_t cols, int64_t ld, float scale,
                         float* dP) {
#if defined(__x86_64__)
  if (isa == DotIsa::kAvx512Bf16 || isa == DotIsa::kAvx512) return grad_rounded_avx512(P, D, rows, cols, ld, scale, dP);
  if (isa == DotIsa::kAvx2) return grad_rounded_avx2(P, D, rows, cols, ld, scale, dP);
#endif
  grad_rounded_baseline(P, D, rows, cols, ld, scale, dP);
}

}  // namespace cleave::kernels::cpu::flash_dots
