// The flash kernel's element-wise block work (see flash_attention_rows.hpp). The bodies are written once over a
// generic vector type F and compiled for the baseline vectors, 8 and 16 lanes (the exp dominates this work, and the
// build's baseline is 4-lane SSE); the sums keep 16 lane accumulators on every path, so the bits agree.
#include "kernels/cpu/flash_attention_rows.hpp"

// Wide vectors never cross a call boundary here (the helpers are always_inline), so the ABI note GCC emits for
// 32- and 64-byte vector arguments without AVX does not apply (before vec_math.hpp, where it is reported).
#pragma GCC diagnostic ignored "-Wpsabi"

#include <cmath>
#include <cstring>
#include <limits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/cpu/vec_math.hpp"
#include "kernels/cpu/wide_vectors.hpp"

namespace cleave::kernels::cpu::flash_rows {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int64_t kSumLanes = 16;

using detail::broadcast;
using detail::load;
using detail::store;

template <class F>
constexpr int64_t kWidth = static_cast<int64_t>(sizeof(F) / sizeof(float));

// The lane accumulators' total, lane 0 to 15.
[[gnu::always_inline]] inline float lane_total(const float* lane) {
  float t = 0.0f;
  for (int64_t j = 0; j < kSumLanes; ++j) t += lane[j];
  return t;
}

// The first n values at p (0 < n <= the width) as a vector whose other lanes are fill, and the first n lanes of v
// stored at p, nothing past them read or written. Baseline through a lane array; AVX2 and AVX-512 (the overloads
// below) as masked loads and stores, where the array's scalar stores and vector load stalled the store forward and a
// variable-length copy was a libc call: every row of a causal block has such a tail (a third of the softmax's time at
// T 64 went to them). Moves only: the values are the same on every path.
template <class F>
[[gnu::always_inline]] inline F load_first(const float* p, int64_t n, F fill) {
  float lane[kWidth<F>];
  store(lane, fill);
  for (int64_t j = 0; j < n; ++j) lane[j] = p[j];
  return load<F>(lane);
}
template <class F>
[[gnu::always_inline]] inline void store_first(float* p, F v, int64_t n) {
  float lane[kWidth<F>];
  store(lane, v);
  for (int64_t j = 0; j < n; ++j) p[j] = lane[j];
}
#if defined(__x86_64__)
[[gnu::target("avx2")]] inline __m256i first_lanes8(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
[[gnu::target("avx2")]] inline detail::f32x8 load_first(const float* p, int64_t n, detail::f32x8 fill) {
  const __m256i m = first_lanes8(n);
  return (detail::f32x8)_mm256_blendv_ps((__m256)fill, _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m));
}
[[gnu::target("avx2")]] inline void store_first(float* p, detail::f32x8 v, int64_t n) {
  _mm256_maskstore_ps(p, first_lanes8(n), (__m256)v);
}
[[gnu::target("avx512f")]] inline detail::f32x16 load_first(const float* p, int64_t n, detail::f32x16 fill) {
  return (detail::f32x16)_mm512_mask_loadu_ps((__m512)fill, static_cast<__mmask16>((1u << n) - 1u), p);
}
[[gnu::target("avx512f")]] inline void store_first(float* p, detail::f32x16 v, int64_t n) {
  _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1u), (__m512)v);
}
#endif

// p[0, n) = +0 in whole and masked vector stores (a fill of a row's masked keys was a libc call per row).
template <class F>
[[gnu::always_inline]] inline void zero_fill(float* p, int64_t n) {
  constexpr int64_t L = kWidth<F>;
  int64_t i = 0;
  for (; i + L <= n; i += L) store(p + i, F{});
  if (i < n) store_first(p + i, F{}, n - i);
}

// {0, 1, ..., width - 1}.
template <class F>
[[gnu::always_inline]] inline F lane_index() {
  F v{};
  for (int64_t j = 0; j < kWidth<F>; ++j) v[j] = static_cast<float>(j);
  return v;
}

// y = exp(x - shift) over n values; with sum, returns their sum (16 lanes, element i into lane i mod 16). The last
// n mod 16 values run as vectors whose lanes past n are exp(0) and are neither stored nor summed (load_first), so
// every path runs whole vectors.
template <class F, bool kSum>
[[gnu::always_inline]] inline float exp_store(const float* x, float shift, float* y, int64_t n) {
  constexpr int64_t L = kWidth<F>, K = kSumLanes / L;
  const F sh = broadcast<F>(shift);
  F acc[K];
  for (int64_t k = 0; k < K; ++k) acc[k] = F{};
  int64_t i = 0;
  for (; i + kSumLanes <= n; i += kSumLanes) {
    for (int64_t k = 0; k < K; ++k) {
      const F e = detail::exp_vec(load<F>(x + i + k * L) - sh);
      store(y + i + k * L, e);
      if constexpr (kSum) acc[k] += e;
    }
  }
  for (int64_t k = 0; k < K && i + k * L < n; ++k) {  // the tail: lanes [0, m) of vector k
    const int64_t m = std::min(L, n - i - k * L);
    const F e = detail::exp_vec(load_first(x + i + k * L, m, sh) - sh);
    store_first(y + i + k * L, e, m);
    if constexpr (kSum) acc[k] = lane_index<F>() < broadcast<F>(static_cast<float>(m)) ? acc[k] + e : acc[k];
  }
  if constexpr (!kSum) return 0.0f;
  float lane[kSumLanes];
  std::memcpy(lane, acc, sizeof lane);
  return lane_total(lane);
}

// max of x[0..n), n >= 1 (exact: the order does not matter).
template <class F>
[[gnu::always_inline]] inline float max_of(const float* x, int64_t n) {
  constexpr int64_t L = kWidth<F>;
  float m = x[0];
  int64_t i = 0;
  if (n >= L) {
    F acc = load<F>(x);
    for (i = L; i + L <= n; i += L) {
      const F v = load<F>(x + i);
      acc = v > acc ? v : acc;
    }
    for (int64_t j = 0; j < L; ++j) m = acc[j] > m ? acc[j] : m;
  }
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

// y *= a over n values.
template <class F>
[[gnu::always_inline]] inline void scale_row(float* y, float a, int64_t n) {
  constexpr int64_t L = kWidth<F>;
  int64_t i = 0;
  for (; i + L <= n; i += L) store(y + i, load<F>(y + i) * a);
  for (; i < n; ++i) y[i] *= a;
}

// x rounded to the nearest multiple of ln 2 (in f32: nearbyint(x log2 e) ln 2); idempotent on its results.
[[gnu::always_inline]] inline float to_ln2_multiple(float x) {
  constexpr float kLog2e = 1.44269504088896340736f, kLn2 = 0.693147180559945309417f;
  return std::nearbyint(x * kLog2e) * kLn2;
}

template <class F>
[[gnu::always_inline]] inline void softmax_update_body(const FlashAttentionShape& s, const BlockRows& blk, float* S,
                                                       float* m, float* l, float* acc, int64_t hd, bool ln2_shift) {
  for (int64_t r = 0; r < blk.rows; ++r) {
    float* srow = S + r * blk.ld;
    const int64_t pi = blk.p_first + r;
    const int64_t a = std::clamp<int64_t>(key_lo(s, pi) - blk.kb, 0, blk.cols);
    const int64_t e = std::clamp<int64_t>(key_hi(s, pi) - blk.kb, 0, blk.cols);
    if (a >= e) {
      zero_fill<F>(srow, blk.cols);
      continue;
    }
    float m_new = std::max(m[r], max_of<F>(srow + a, e - a));
    if (ln2_shift) m_new = to_ln2_multiple(m_new);
    const float alpha = m[r] == kNegInf ? 0.0f : detail::exp_vec(broadcast<F>(m[r] - m_new))[0];
    const float sum = exp_store<F, true>(srow + a, m_new, srow + a, e - a);
    zero_fill<F>(srow, a);
    zero_fill<F>(srow + e, blk.cols - e);
    l[r] = l[r] * alpha + sum;
    m[r] = m_new;
    if (alpha != 1.0f) scale_row<F>(acc + r * hd, alpha, hd);
  }
}

template <class F>
[[gnu::always_inline]] inline void probabilities_body(const FlashAttentionShape& s, const BlockRows& blk,
                                                      const float* lse, float* S) {
  for (int64_t r = 0; r < blk.rows; ++r) {
    float* prow = S + r * blk.ld;
    const int64_t pi = blk.p_first + r;
    const int64_t a = std::clamp<int64_t>(key_lo(s, pi) - blk.kb, 0, blk.cols);
    const int64_t e = std::clamp<int64_t>(key_hi(s, pi) - blk.kb, 0, blk.cols);
    if (a >= e || lse[r] == kNegInf) {
      zero_fill<F>(prow, blk.cols);
      continue;
    }
    exp_store<F, false>(prow + a, lse[r], prow + a, e - a);
    zero_fill<F>(prow, a);
    zero_fill<F>(prow + e, blk.cols - e);
  }
}

template <class F>
[[gnu::always_inline]] inline void scores_grad_body(const float* P, const float* D, int64_t rows, int64_t cols,
                                                    int64_t ld, float scale, float* dP) {
  constexpr int64_t L = kWidth<F>;
  for (int64_t r = 0; r < rows; ++r) {
    const float* prow = P + r * ld;
    float* dsrow = dP + r * ld;
    const float Di = D[r];
    int64_t j = 0;
    for (; j + L <= cols; j += L) store(dsrow + j, load<F>(prow + j) * (load<F>(dsrow + j) - Di) * scale);
    for (; j < cols; ++j) dsrow[j] = prow[j] * (dsrow[j] - Di) * scale;
  }
}

template <class F>
[[gnu::always_inline]] inline void output_dots_body(const float* o, int64_t ld_o, const float* d_o, int64_t ld_do,
                                                    int64_t rows, int64_t hd, float* D) {
  constexpr int64_t L = kWidth<F>, K = kSumLanes / L;
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = o + r * ld_o;
    const float* y = d_o + r * ld_do;
    F acc[K];
    for (int64_t k = 0; k < K; ++k) acc[k] = F{};
    int64_t i = 0;
    for (; i + kSumLanes <= hd; i += kSumLanes) {
      for (int64_t k = 0; k < K; ++k) acc[k] += load<F>(x + i + k * L) * load<F>(y + i + k * L);
    }
    float lane[kSumLanes];
    std::memcpy(lane, acc, sizeof lane);
    for (int64_t j = 0; i + j < hd; ++j) lane[j] += x[i + j] * y[i + j];
    D[r] = lane_total(lane);
  }
}

// The paths: one function per op and instruction set, each the body on its vector type, without FMA contraction.
// A macro, like gelu.cpp's, so each path carries its target attribute.
#define CLEAVE_FLASH_ROW_PATHS(suffix, F, ...)                                                                     \
  __VA_ARGS__ void softmax_update_##suffix(const FlashAttentionShape& s, const BlockRows& blk, float* S, float* m, \
                                           float* l, float* acc, int64_t hd, bool ln2_shift) {                     \
    softmax_update_body<F>(s, blk, S, m, l, acc, hd, ln2_shift);                                                   \
  }                                                                                                                \
  __VA_ARGS__ void probabilities_##suffix(const FlashAttentionShape& s, const BlockRows& blk, const float* lse,     \
                                          float* S) {                                                              \
    probabilities_body<F>(s, blk, lse, S);                                                                         \
  }                                                                                                                \
  __VA_ARGS__ void scores_grad_##suffix(const float* P, const float* D, int64_t rows, int64_t cols, int64_t ld,    \
                                        float scale, float* dP) {                                                  \
    scores_grad_body<F>(P, D, rows, cols, ld, scale, dP);                                                          \
  }                                                                                                                \
  __VA_ARGS__ void output_dots_##suffix(const float* o, int64_t ld_o, const float* d_o, int64_t ld_do,             \
                                        int64_t rows, int64_t hd, float* D) {                                      \
    output_dots_body<F>(o, ld_o, d_o, ld_do, rows, hd, D);                                                         \
  }

// Every path: no FMA contraction (the bits), no loop turned into a libc memset / memcpy call (the short rows' fills
// and tails, zero_fill and store_first); the wide paths flattened, so the masked load and store helpers, which carry
// their target, inline into them through exp_store (GCC does not inline a target function into a generic one).
#define CLEAVE_FLASH_ROW_OPTIMIZE optimize("fp-contract=off", "no-tree-loop-distribute-patterns")
CLEAVE_FLASH_ROW_PATHS(baseline, detail::f32xN, __attribute__((CLEAVE_FLASH_ROW_OPTIMIZE)))
#if defined(__x86_64__)
CLEAVE_FLASH_ROW_PATHS(avx2, detail::f32x8, __attribute__((target("avx2"), CLEAVE_FLASH_ROW_OPTIMIZE, flatten)))
CLEAVE_FLASH_ROW_PATHS(avx512, detail::f32x16, __attribute__((target("avx512f"), CLEAVE_FLASH_ROW_OPTIMIZE, flatten)))
#endif
#undef CLEAVE_FLASH_ROW_OPTIMIZE
#undef CLEAVE_FLASH_ROW_PATHS

}  // namespace

void softmax_update(VectorIsa isa, const FlashAttentionShape& s, const BlockRows& blk, float* S, float* m, float* l,
                    float* acc, int64_t hd, bool ln2_shift) {
  isa_path(isa, "flash_attention_forward", CLEAVE_ISA_PATHS(softmax_update))(s, blk, S, m, l, acc, hd, ln2_shift);
}

void probabilities(VectorIsa isa, const FlashAttentionShape& s, const BlockRows& blk, const float* lse, float* S) {
  isa_path(isa, "flash_attention_backward", CLEAVE_ISA_PATHS(probabilities))(s, blk, lse, S);
}

void scores_grad(VectorIsa isa, const float* P, const float* D, int64_t rows, int64_t cols, int64_t ld, float scale,
                 float* dP) {
  isa_path(isa, "flash_attention_backward", CLEAVE_ISA_PATHS(scores_grad))(P, D, rows, cols, ld, scale, dP);
}

void output_dots(VectorIsa isa, const float* o, int64_t ld_o, const float* d_o, int64_t ld_do, int64_t rows,
                 int64_t hd, float* D) {
  isa_path(isa, "flash_attention_backward", CLEAVE_ISA_PATHS(output_dots))(o, ld_o, d_o, ld_do, rows, hd, D);
}

}  // namespace cleave::kernels::cpu::flash_rows
