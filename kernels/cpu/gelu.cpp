// GELU (tanh approximation, GPT-2). See gelu.hpp. The body is written once over generic vectors; each
// instruction-set path runs it on its widest vector and on a one-lane splat of that vector for the tail.
//
// Why several paths: the build targets baseline x86-64 (4 lanes, SSE2) and GELU is a visible share of a
// small model's step (issue 39: 8% of the small GPT's with libm's tanh; 2.5% of its fp32 samples and 3.5% of its
// bf16 ones vectorised, benchmarks/peers/RESULTS-2026-11-28-e-cpu.md). The AVX2 and AVX-512 functions below
// compile the same template for 8 and 16 lanes and are chosen at run time from the CPU. Every path performs the
// same IEEE operations on each element, in the same order, without contraction into FMA (fp-contract=off), so all
// paths give the same bits (KernelGelu.EveryIsaPathGivesTheSameBits).
//
// The form (2026-12-01, issue 39 part 4): the logistic x / (1 + 2^w) below with this file's own 2^f polynomial, not
// 1 - 2 / (exp(2u) + 1) through vec_math.hpp's exp_vec: fewer operations (no Cody-Waite reduction, w is already in
// base 2) and no cancellation, so y and dy/dx stay within 6 * 2^-24 (1 + |w|) of the formula relative to
// themselves (KernelGelu.MatchesTheFormulaRelativelyOverTheWholeFloatRange), where the exp form was off by up to
// 3e-7 (y) and 2e-6 (dy/dx) absolutely for x near -5 (benchmarks/kernels/RESULTS-2026-12-01-v-gelu-tanh.md).
#include "kernels/cpu/gelu.hpp"

// Wide vectors never cross a call boundary here (the helpers are always_inline), so the ABI note GCC emits for
// 32- and 64-byte vector arguments without AVX does not apply (before vec_math.hpp, where it is reported).
#pragma GCC diagnostic ignored "-Wpsabi"

#include <bit>
#include <limits>

#include "engine/core/error.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/vec_math.hpp"
#include "kernels/cpu/wide_vectors.hpp"

namespace cleave::kernels::cpu {
namespace {

using detail::broadcast;
using detail::f32x16;
using detail::f32x8;
using detail::load;
using detail::store;

// 0.5 x (1 + tanh(u)) = x / (1 + e^(-2u)) with u = sqrt(2/pi) (x + 0.044715 x^3), and e^(-2u) = 2^w with
// w = -2 log2(e) u = x (kW1 + kW3 x^2). The derivative is s + 2 x s (1 - s) du/dx with s = 1 / (1 + e^(-2u)),
// 1 - s = e^(-2u) s and 2 du/dx = kD0 + kD2 x^2. Every quantity stays relative to what it is, so neither
// 1 + tanh(u) for negative x nor 1 - tanh(u)^2 for large |x| loses its digits to cancellation.
constexpr float kW1 = -2.302208198144325f;    // -2 log2(e) sqrt(2/pi)
constexpr float kW3 = -0.1029432395800235f;  // -2 log2(e) sqrt(2/pi) 0.044715
constexpr float kD0 = 1.5957691216057308f;    // 2 sqrt(2/pi)
constexpr float kD2 = 0.21406444881780076f;   // 6 sqrt(2/pi) 0.044715
// 2^f = 1 + f (kP1 + f (kP2 + f (kP3 + f (kP4 + f kP5)))) on f in [-1/2, 1/2]: our own relative-minimax fit, the
// coefficients rounded to float one at a time (benchmarks/kernels/fit_gelu_exp2.py, which prints them and
// measures 2.17 ulp at most over every float f).
constexpr float kP1 = 0.693147f;
constexpr float kP2 = 0.24022247f;
constexpr float kP3 = 0.05550711f;
constexpr float kP4 = 0.009671294f;
constexpr float kP5 = 0.001326961f;
constexpr float kRoundToInteger = 12582912.0f;  // 1.5 * 2^23: w + it holds round(w) in its low mantissa bits
// Backward only: |x| beyond 10 gives the value at +-10 (1, and -3.6e-36 for the true -3.6e-36 and below), and
// keeps x^2 and x^3 finite; the forward needs no clamp.
constexpr float kGradClamp = 10.0f;

// 2^w for w clamped to [-127, 128] (NaN passes through): n = round(w) built in the exponent bits (0 at n = -127,
// +inf at n = 128), f = w - n exact.
template <class F>
[[gnu::always_inline]] inline F pow2(F w) {
  using U = typename detail::U32Of<F>::type;
  const F hi = F{} + 128.0f;
  const F lo = F{} - 127.0f;
  w = w > hi ? hi : w;  // NaN fails both comparisons and stays NaN
  w = w < lo ? lo : w;
  const F biased = w + kRoundToInteger;
  const F f = w - (biased - kRoundToInteger);
  F p = kP4 + f * kP5;
  p = kP3 + f * p;
  p = kP2 + f * p;
  p = kP1 + f * p;
  p = 1.0f + f * p;
  // biased's bits are 0x4B400000 + n; shifting n + 127 into the exponent field drops the 0x4B4 above it.
  return p * std::bit_cast<F>((std::bit_cast<U>(biased) + 127u) << 23);
}

template <class F>
[[gnu::always_inline]] inline F gelu_vec(F x) {
  const F e = pow2(x * (kW1 + kW3 * (x * x)));  // +inf for very negative x: s = 0, y = -0
  const F s = 1.0f / (1.0f + e);
  // x > 0: x - x (1 - s), the small correction rounded once; x beyond FLT_MAX (+inf) in the correction would make
  // inf * 0. Otherwise (negative, zeros, NaN) x s, which keeps -0 and NaN.
  const F finite = F{} + std::numeric_limits<float>::max();
  const F x_finite = x > finite ? finite : x;
  return x > 0.0f ? x - x_finite * (e * s) : x * s;
}

template <class F>
[[gnu::always_inline]] inline F gelu_grad_vec(F x, F dy) {
  const F hi = F{} + kGradClamp;
  const F lo = F{} - kGradClamp;
  F xc = x > hi ? hi : x;
  xc = xc < lo ? lo : xc;
  const F x2 = xc * xc;
  const F e = pow2(xc * (kW1 + kW3 * x2));  // finite: |w| <= 126 at |x| <= 10
  const F s = 1.0f / (1.0f + e);
  const F g = s + (xc * s) * ((e * s) * (kD0 + kD2 * x2));
  return dy * (g + x * 0.0f);  // x * 0 is NaN at +-inf (as the formula's inf * 0), +-0 elsewhere
}

// The loops are spelled out per path (a macro, not a template) because OpenMP outlines a parallel region into a
// function that takes the target of the function it is written in.
#define CLEAVE_GELU_PATHS(suffix, F, lanes, ...)                                                                \
  __VA_ARGS__ void forward_##suffix(const float* x, float* y, int64_t n) {                                      \
    const int64_t vectors = n / (lanes);                                                                        \
    CLEAVE_PARALLEL_FOR(v, vectors, detail::worth_parallel(n),                                                  \
                        store(y + v * (lanes), gelu_vec(load<F>(x + v * (lanes))));)                            \
    for (int64_t i = vectors * (lanes); i < n; ++i) y[i] = gelu_vec(broadcast<F>(x[i]))[0];                     \
  }                                                                                                             \
  __VA_ARGS__ void backward_##suffix(const float* x, const float* dy, float* dx, int64_t n) {                   \
    const int64_t vectors = n / (lanes);                                                                        \
    CLEAVE_PARALLEL_FOR(v, vectors, detail::worth_parallel(n),                                                  \
      store(dx + v * (lanes), gelu_grad_vec(load<F>(x + v * (lanes)), load<F>(dy + v * (lanes))));)             \
    for (int64_t i = vectors * (lanes); i < n; ++i) {                                                           \
      dx[i] = gelu_grad_vec(broadcast<F>(x[i]), broadcast<F>(dy[i]))[0];                                        \
    }                                                                                                           \
  }

CLEAVE_GELU_PATHS(baseline, detail::f32xN, static_cast<int64_t>(sizeof(detail::f32xN) / 4),
                  __attribute__((optimize("fp-contract=off"))))
#if defined(__x86_64__)
CLEAVE_GELU_PATHS(avx2, f32x8, 8, __attribute__((target("avx2"), optimize("fp-contract=off"))))
CLEAVE_GELU_PATHS(avx512, f32x16, 16, __attribute__((target("avx512f"), optimize("fp-contract=off"))))
#endif
#undef CLEAVE_GELU_PATHS

}  // namespace

void gelu_forward_isa(VectorIsa isa, const float* x, float* y, int64_t n) {
  CLEAVE_ASSERT(n >= 0, "gelu_forward: negative size {}", n);
  isa_path(isa, "gelu_forward", CLEAVE_ISA_PATHS(forward))(x, y, n);
}

void gelu_backward_isa(VectorIsa isa, const float* x, const float* dy, float* dx, int64_t n) {
  CLEAVE_ASSERT(n >= 0, "gelu_backward: negative size {}", n);
  isa_path(isa, "gelu_backward", CLEAVE_ISA_PATHS(backward))(x, dy, dx, n);
}

void gelu_forward(const float* x, float* y, int64_t n) { gelu_forward_isa(best_vector_isa(), x, y, n); }

void gelu_backward(const float* x, const float* dy, float* dx, int64_t n) {
  gelu_backward_isa(best_vector_isa(), x, dy, dx, n);
}

}  // namespace cleave::kernels::cpu
