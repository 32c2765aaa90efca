// The bf16 flash kernel's score products (see flash_attention_dots.hpp). A register tile is up to 4 rows x 16
// columns; every path walks the head dimension in the same pair order, so each S element sees the same additions.
#include "kernels/cpu/flash_attention_dots.hpp"

// Wide vectors never cross a call boundary here (the helpers are always_inline; see flash_attention_rows.cpp).
#pragma GCC diagnostic ignored "-Wpsabi"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstring>

#include "engine/core/error.hpp"
#include "kernels/cpu/bf16_vectors.hpp"
#include "kernels/cpu/cast.hpp"
#include "kernels/cpu/vector_isa.hpp"
#include "kernels/cpu/wide_vectors.hpp"

namespace cleave::kernels::cpu::flash_dots {
namespace {

typedef float f32x4 __attribute__((vector_size(16)));

// Every lane v. Not detail::broadcast (which keeps -0.0): GCC builds that splat through the stack here. A -0.0 in
// place of +0.0 changes no sum: the accumulator starts at +0.0 and, rounding to nearest, never becomes -0.0, and
// acc + (+-0) = acc for every other acc.
template <class F>
[[gnu::always_inline]] inline F splat(float v) {
  return F{} + v;
}

// acc [rows][vectors] * scale into S's columns [c0, min(c0 + 16, cols)), or (kAdd) added to what they hold.
template <bool kAdd, class F, int R, int NV>
[[gnu::always_inline]] inline void store_tile(const F (&acc)[R][NV], float scale, float* S, int64_t ld, int64_t c0,
                                              int64_t cols) {
  constexpr int64_t L = static_cast<int64_t>(sizeof(F) / sizeof(float));
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      const int64_t c = c0 + v * L;
      if (c >= cols) break;
      F y = acc[r][v] * detail::broadcast<F>(scale);
      if (c + L <= cols) {
        if constexpr (kAdd) y = detail::load<F>(S + r * ld + c) + y;
        detail::store(S + r * ld + c, y);
      } else {
        float lane[L] = {};
        if constexpr (kAdd) std::memcpy(lane, S + r * ld + c, (cols - c) * sizeof(float));
        y = kAdd ? detail::load<F>(lane) + y : y;
        detail::store(lane, y);
        std::memcpy(S + r * ld + c, lane, (cols - c) * sizeof(float));
      }
    }
  }
}

// The FMA paths: a f32 pairs (row r's pair p at pair index r * rs + p * ps), b pairs from column c0 (pair stride cp
// 32-bit words). The odd element's product first, as vdpbf16ps; the products are exact, so contraction into FMA
// changes no bit.
template <bool kAdd, class F, int R, int NV>
[[gnu::always_inline]] inline void fma_tile(const float* a, int64_t rs, int64_t ps, const std::uint32_t* b, int64_t cp,
                                            int64_t pairs, float scale, float* S, int64_t ld, int64_t c0,
                                            int64_t cols) {
  constexpr int64_t L = static_cast<int64_t>(sizeof(F) / sizeof(float));
  using U = typename detail::IntVectors<L>::U32;
  F acc[R][NV];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) acc[r][v] = F{};
  }
  for (int64_t p = 0; p < pairs; ++p) {
    F k_odd[NV], k_even[NV];
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      U u;
      __builtin_memcpy(&u, b + p * cp + c0 + v * L, sizeof u);
      k_odd[v] = __builtin_bit_cast(F, u & 0xffff0000u);
      k_even[v] = __builtin_bit_cast(F, u << 16);
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const float* x = a + 2 * (r * rs + p * ps);
      const F x_odd = splat<F>(x[1]), x_even = splat<F>(x[0]);
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) {
        acc[r][v] = acc[r][v] + x_odd * k_odd[v];
        acc[r][v] = acc[r][v] + x_even * k_even[v];
      }
    }
  }
  store_tile<kAdd, F, R, NV>(acc, scale, S, ld, c0, cols);
}

// R rows by NV vectors of columns from c0, the last rows in tiles of R / 2 and 1.
template <bool kAdd, class F, int R, int NV>
[[gnu::always_inline]] inline void fma_columns(const float* a, int64_t rows, int64_t rs, int64_t ps, const std::uint32_t* b,
                                               int64_t cp, int64_t pairs, float scale, float* S, int64_t ld,
                                               int64_t c0, int64_t cols) {
  int64_t r = 0;
  for (; r + R <= rows; r += R) fma_tile<kAdd, F, R, NV>(a + 2 * r * rs, rs, ps, b, cp, pairs, scale, S + r * ld, ld, c0, cols);
  if (r + R / 2 <= rows) {
    fma_tile<kAdd, F, R / 2, NV>(a + 2 * r * rs, rs, ps, b, cp, pairs, scale, S + r * ld, ld, c0, cols);
    r += R / 2;
  }
  for (; r < rows; ++r) fma_tile<kAdd, F, 1, NV>(a + 2 * r * rs, rs, ps, b, cp, pairs, scale, S + r * ld, ld, c0, cols);
}

// 32 columns a tile where they fit (8 rows on 16 lanes, 4 on fewer: the accumulators and key vectors stay in
// registers), then 16.
template <bool kAdd, class F>
[[gnu::always_inline]] inline void fma_scores(const Lhs& a, int64_t rows, const float* b, int64_t cols, int64_t hd,
                                              float scale, float* S, int64_t ld) {
  constexpr int L = static_cast<int>(sizeof(F) / sizeof(float)), R = L == 16 ? 8 : 4, NV = kPairCols / L;
  const int64_t pairs = pair_dim(hd) / 2, cp = padded_cols(cols);
  const auto* b32 = reinterpret_cast<const std::uint32_t*>(b);
  int64_t c0 = 0;
  for (; c0 + 2 * kPairCols <= cp; c0 += 2 * kPairCols) {
    fma_columns<kAdd, F, R, 2 * NV>(a.p, rows, a.rs, a.ps, b32, cp, pairs, scale, S, ld, c0, cols);
  }
  if (c0 < cols) fma_columns<kAdd, F, R, NV>(a.p, rows, a.rs, a.ps, b32, cp, pairs, scale, S, ld, c0, cols);
}

void scores_baseline(const Lhs& a, int64_t rows, const float* b, int64_t cols, int64_t hd, float scale, bool add,
                     float* S, int64_t ld) {
  if (add) return fma_scores<true, f32x4>(a, rows, b, cols, hd, scale, S, ld);
  fma_scores<false, f32x4>(a, rows, b, cols, hd, scale, S, ld);
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) void scores_avx2(const Lhs& a, int64_t rows, const float* b, int64_t cols,
                                                      int64_t hd, float scale, bool add, float* S, int64_t ld) {
  if (add) return fma_scores<true, detail::f32x8>(a, rows, b, cols, hd, scale, S, ld);
  fma_scores<false, detail::f32x8>(a, rows, b, cols, hd, scale, S, ld);
}

__attribute__((target("avx512f,avx512bw"))) void scores_avx512(const Lhs& a, int64_t rows, const float* b,
                                                               int64_t cols, int64_t hd, float scale, bool add,
                                                               float* S, int64_t ld) {
  if (add) return fma_scores<true, detail::f32x16>(a, rows, b, cols, hd, scale, S, ld);
  fma_scores<false, detail::f32x16>(a, rows, b, cols, hd, scale, S, ld);
}

// One accumulator vector times scale into S's columns [c, min(c + 16, cols)), or (kAdd) added to what they hold: the
// arithmetic of store_tile, with a masked load and store at the row's end in place of its lane copy.
template <bool kAdd>
__attribute__((target("avx512f,avx512bw,avx512bf16"), always_inline)) inline void bf16_store(__m512 acc, float scale,
                                                                                             float* S, int64_t c,
                                                                                             int64_t cols) {
  __m512 y = _mm512_mul_ps(acc, _mm512_set1_ps(scale));
  if (c + kPairCols <= cols) {
    if constexpr (kAdd) y = _mm512_add_ps(_mm512_loadu_ps(S + c), y);
    _mm512_storeu_ps(S + c, y);
    return;
  }
  const auto lanes = static_cast<__mmask16>((1u << (cols - c)) - 1u);
  if constexpr (kAdd) y = _mm512_add_ps(_mm512_maskz_loadu_ps(lanes, S + c), y);
  _mm512_mask_storeu_ps(S + c, lanes, y);
}

// vdpbf16ps: a bf16 pairs (row r's pair p the 32-bit word r * rs + p * ps), one pair broadcast per row and step, NV x
// 16 columns. Every loop over the tile is unrolled, so the R x NV accumulators live in registers from the first
// product to the store (an accumulator indexed by a loop variable goes to the stack).
template <bool kAdd, int R, int NV>
__attribute__((target("avx512f,avx512bw,avx512bf16"), always_inline)) inline void bf16_tile(
    const std::uint32_t* a, int64_t rs, int64_t ps, const std::uint32_t* b, int64_t cp, int64_t pairs, float scale,
    float* S, int64_t ld, int64_t c0, int64_t cols) {
  __m512 acc[R][NV];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < pairs; ++p) {
    __m512i kv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) kv[v] = _mm512_loadu_si512(b + p * cp + c0 + v * kPairCols);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512i x = _mm512_set1_epi32(static_cast<int>(a[r * rs + p * ps]));
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], (__m512bh)kv[v], (__m512bh)x);
    }
  }
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) {
    const int64_t c = c0 + v * kPairCols;
    if (c >= cols) break;
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) bf16_store<kAdd>(acc[r][v], scale, S + r * ld, c, cols);
  }
}

template <bool kAdd, int NV>
__attribute__((target("avx512f,avx512bw,avx512bf16"), always_inline)) inline void bf16_columns(
    const std::uint32_t* a, int64_t rows, int64_t rs, int64_t ps, const std::uint32_t* b, int64_t cp, int64_t pairs,
    float scale, float* S, int64_t ld, int64_t c0, int64_t cols) {
  // 8 x 2 accumulators: 2 key loads and 8 broadcasts per 16 vdpbf16ps (of the 32 vector registers); the last rows in
  // tiles of 4, 2 and 1.
  int64_t r = 0;
  for (; r + 8 <= rows; r += 8) bf16_tile<kAdd, 8, NV>(a + r * rs, rs, ps, b, cp, pairs, scale, S + r * ld, ld, c0, cols);
  if (r + 4 <= rows) {
    bf16_tile<kAdd, 4, NV>(a + r * rs, rs, ps, b, cp, pairs, scale, S + r * ld, ld, c0, cols);
    r += 4;
  }
  if (r + 2 <= rows) {
    bf16_tile<kAdd, 2, NV>(a + r * rs, rs, ps, b, cp, pairs, scale, S + r * ld, ld, c0, cols);
    r += 2;
  }
  if (r < rows) bf16_tile<kAdd, 1, NV>(a + r * rs, rs, ps, b, cp, pairs, scale, S + r * ld, ld, c0, cols);
}

template <bool kAdd>
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void bf16_scores(const Lhs& a, int64_t rows, const float* b,
                                                                       int64_t cols, int64_t hd, float scale,
                                                                       float* S, int64_t ld) {
  const int64_t pairs = pair_dim(hd) / 2, cp = padded_cols(cols);
  const auto* a32 = reinterpret_cast<const std::uint32_t*>(a.p);
  const auto* b32 = reinterpret_cast<const std::uint32_t*>(b);
  int64_t c0 = 0;
  for (; c0 + 2 * kPairCols <= cp; c0 += 2 * kPairCols) {
    bf16_columns<kAdd, 2>(a32, rows, a.rs, a.ps, b32, cp, pairs, scale, S, ld, c0, cols);
  }
  if (c0 < cols) bf16_columns<kAdd, 1>(a32, rows, a.rs, a.ps, b32, cp, pairs, scale, S, ld, c0, cols);
}

__attribute__((target("avx512f,avx512bw,avx512bf16"))) void scores_avx512_bf16(const Lhs& a, int64_t rows,
                                                                              const float* b, int64_t cols,
                                                                              int64_t hd, float scale, bool add,
                                                                              float* S, int64_t ld) {
  if (add) return bf16_scores<true>(a, rows, b, cols, hd, scale, S, ld);
  bf16_scores<false>(a, rows, b, cols, hd, scale, S, ld);
}
#endif

}  // namespace

bool dot_isa_available(DotIsa isa) {
#if defined(__x86_64__)
  switch (isa) {
    case DotIsa::kBaseline: return true;
    case DotIsa::kAvx2: return vector_isa_available(VectorIsa::kAvx2) && __builtin_cpu_supports("fma");
    case DotIsa::kAvx512: return vector_isa_available(VectorIsa::kAvx512);
    case DotIsa::kAvx512Bf16: return vector_isa_available(VectorIsa::kAvx512) && avx512_bf16_available();
  }
  return false;
#else
  return isa == DotIsa::kBaseline;
#endif
}

DotIsa best_dot_isa() {
  for (DotIsa isa : {DotIsa::kAvx512Bf16, DotIsa::kAvx512, DotIsa::kAvx2}) {
    if (dot_isa_available(isa)) return isa;
  }
  return DotIsa::kBaseline;
}

void pack_pairs(const std::uint16_t* b, int64_t ld, int64_t cols, int64_t hd, float* out) {
  const int64_t cp = padded_cols(cols), pairs = pair_dim(hd) / 2, whole = hd / 2;  // whole: pairs without a pad
  auto* o = reinterpret_cast<std::uint32_t*>(out);
  // A 32-bit transpose of [cols, whole] in 8 x 8 tiles (a pair's two bf16 values are one 32-bit word).
  constexpr int64_t kTile = 8;
  for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
    const int64_t c1 = std::min(cols, c0 + kTile);
    for (int64_t p0 = 0; p0 < whole; p0 += kTile) {
      const int64_t p1 = std::min(whole, p0 + kTile);
      for (int64_t c = c0; c < c1; ++c) {
        for (int64_t p = p0; p < p1; ++p) __builtin_memcpy(o + p * cp + c, b + c * ld + 2 * p, sizeof(std::uint32_t));
      }
    }
  }
  if (pairs > whole) {  // odd hd: the last pair is (b[c, hd - 1], 0)
    for (int64_t c = 0; c < cols; ++c) o[whole * cp + c] = b[c * ld + hd - 1];
  }
  for (int64_t p = 0; p < pairs; ++p) std::fill(o + p * cp + cols, o + (p + 1) * cp, 0u);
}

void pack_rows(DotIsa isa, const std::uint16_t* a, int64_t ld, int64_t rows, int64_t hd, float* out) {
  const int64_t hdp = pair_dim(hd);
  if (isa == DotIsa::kAvx512Bf16) {
    auto* o = reinterpret_cast<std::uint16_t*>(out);
    for (int64_t r = 0; r < rows; ++r) {
      __builtin_memcpy(o + r * hdp, a + r * ld, hd * sizeof(std::uint16_t));
      if (hdp > hd) o[r * hdp + hd] = 0;
    }
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    cast_bf16_to_f32_serial(a + r * ld, out + r * hdp, hd);
    if (hdp > hd) out[r * hdp + hd] = 0.0f;
  }
}

namespace {

void dots(DotIsa isa, const Lhs& a, int64_t rows, const float* b, int64_t cols, int64_t k, float scale, bool add,
          float* S, int64_t ld) {
  CLEAVE_ASSERT(dot_isa_available(isa), "flash_attention: dot-product path {} is not available on this CPU",
                static_cast<int>(isa));
#if defined(__x86_64__)
  switch (isa) {
    case DotIsa::kAvx512Bf16: return scores_avx512_bf16(a, rows, b, cols, k, scale, add, S, ld);
    case DotIsa::kAvx512: return scores_avx512(a, rows, b, cols, k, scale, add, S, ld);
    case DotIsa::kAvx2: return scores_avx2(a, rows, b, cols, k, scale, add, S, ld);
    case DotIsa::kBaseline: break;
  }
#endif
  scores_baseline(a, rows, b, cols, k, scale, add, S, ld);
}
}  // namespace

void scores(DotIsa isa, const float* a, int64_t rows, const float* b, int64_t cols, int64_t hd, float scale, float* S,
            int64_t ld) {
  dots(isa, Lhs{a, pair_dim(hd) / 2, 1}, rows, b, cols, hd, scale, false, S, ld);
}

void products(DotIsa isa, const Lhs& a, int64_t rows, const float* b, int64_t cols, int64_t k, float* C,
              int64_t ld) {
  dots(isa, a, rows, b, cols, k, 1.0f, true, C, ld);
}

}  // namespace cleave::kernels::cpu::flash_dots
