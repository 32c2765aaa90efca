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

// y = exp(x - shift) over n values; with sum, returns their sum (16 lanes, element i into lane i mod 16). The last
// n mod 16 values go through a padded copy, so every path runs whole vectors.
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
  float lane[kSumLanes];
  std::memcpy(lane, acc, sizeof lane);
  const int64_t rest = n - i;
  if (rest > 0) {
    float in[kSumLanes], ex[kSumLanes];
    std::memcpy(in, x + i, rest * sizeof(float));
    std::fill(in + rest, in + kSumLanes, shift);
    for (int64_t k = 0; k < K; ++k) store(ex + k * L, detail::exp_vec(load<F>(in + k * L) - sh));
    std::memcpy(y + i, ex, rest * sizeof(float));
    for (int64_t j = 0; j < rest; ++j) lane[j] += ex[j];
  }
  return kSum ? lane_total(lane) : 0.0f;
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
      std::fill(srow, srow + blk.cols, 0.0f);
      continue;
    }
    float m_new = std::max(m[r], max_of<F>(srow + a, e - a));
    if (ln2_shift) m_new = to_ln2_multiple(m_new);
    const float alpha = m[r] == kNegInf ? 0.0f : detail::exp_vec(broadcast<F>(m[r] - m_new))[0];
    const float sum = exp_store<F, true>(srow + a, m_new, srow + a, e - a);
    std::fill(srow, srow + a, 0.0f);
    std::fill(srow + e, srow + blk.cols, 0.0f);
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
      std::fill(prow, prow + blk.cols, 0.0f);
      continue;
    }
    exp_store<F, false>(prow + a, lse[r], prow + a, e - a);
    std::fill(prow, prow + a, 0.0f);
    std::fill(prow + e, prow + blk.cols, 0.0f);
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

CLEAVE_FLASH_ROW_PATHS(baseline, detail::f32xN, __attribute__((optimize("fp-contract=off"))))
#if defined(__x86_64__)
CLEAVE_FLASH_ROW_PATHS(avx2, detail::f32x8, __attribute__((target("avx2"), optimize("fp-contract=off"))))
CLEAVE_FLASH_ROW_PATHS(avx512, detail::f32x16, __attribute__((target("avx512f"), optimize("fp-contract=off"))))
#endif
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
