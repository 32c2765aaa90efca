// GELU (tanh approximation, GPT-2). See gelu.hpp. The body is written once over generic vectors; each
// instruction-set path runs it on its widest vector and on a one-lane splat of that vector for the tail.
//
// Why several paths: the build targets baseline x86-64 (4 lanes, SSE2) and GELU is a visible share of a
// small model's step (issue 39: 8% of the small GPT's with libm's tanh; 2.5% of its fp32 samples and 3.5% of its
// bf16 ones vectorised, benchmarks/peers/RESULTS-2026-11-28-e-cpu.md). The AVX2 and AVX-512 functions below
// compile the same template for 8 and 16 lanes and are chosen at run time from the CPU. Every path performs the
// same IEEE operations on each element, in the same order, without contraction into FMA (fp-contract=off), so all
// paths give the same bits (KernelGelu.EveryIsaPathGivesTheSameBits).
#include "kernels/cpu/gelu.hpp"

// Wide vectors never cross a call boundary here (the helpers are always_inline), so the ABI note GCC emits for
// 32- and 64-byte vector arguments without AVX does not apply (before vec_math.hpp, where it is reported).
#pragma GCC diagnostic ignored "-Wpsabi"

#include "engine/core/error.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/vec_math.hpp"
#include "kernels/cpu/wide_vectors.hpp"

namespace cleave::kernels::cpu {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCoeff = 0.044715f;

using detail::broadcast;
using detail::f32x16;
using detail::f32x8;
using detail::load;
using detail::store;

template <class F>
[[gnu::always_inline]] inline F gelu_vec(F x) {
  const F u = kSqrt2OverPi * (x + kCoeff * x * x * x);
  return 0.5f * x * (1.0f + detail::tanh_vec(u));
}

template <class F>
[[gnu::always_inline]] inline F gelu_grad_vec(F x, F dy) {
  const F u = kSqrt2OverPi * (x + kCoeff * x * x * x);
  const F t = detail::tanh_vec(u);
  const F sech2 = 1.0f - t * t;
  const F du_dx = kSqrt2OverPi * (1.0f + 3.0f * kCoeff * x * x);
  return dy * (0.5f * (1.0f + t) + 0.5f * x * sech2 * du_dx);
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
