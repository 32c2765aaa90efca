// AdamW, following torch.optim.AdamW's single-tensor path operation for operation. See adamw.hpp.
// The body is written once over generic vectors; each instruction-set path (baseline, AVX2, AVX-512: vector_isa.hpp)
// runs it on its widest vector and on a one-lane broadcast for the tail, as gelu.cpp does. One pass over param, grad,
// m and v: memory-bound (7 streams of floats). Every path performs the same IEEE operations on each element in the
// same order, without contraction (fp-contract=off), and sqrt and division are correctly rounded on every path, so
// all paths and thread counts give the same bits (KernelAdamW.EveryIsaPathAndThreadCountGivesTheSameBits), those of
// the 4-lane loop before the paths (2026-12-01-l).
#include "kernels/cpu/adamw.hpp"

// Wide vectors never cross a call boundary here (the helpers are always_inline): see gelu.cpp.
#pragma GCC diagnostic ignored "-Wpsabi"

#include <cmath>

#include "engine/core/error.hpp"
#include "kernels/adamw_constants.hpp"
#include "kernels/cpu/multi_tensor.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/vec_math.hpp"
#include "kernels/cpu/wide_vectors.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace cleave::kernels::cpu {
namespace {

using detail::broadcast;
using detail::f32x16;
using detail::f32x8;
using detail::load;
using detail::store;
using kernels::AdamWConstants;

// m and v after this step, and the decayed parameter.
template <class F>
struct Moments {
  F m, v, decayed;
};

template <class F>
[[gnu::always_inline]] inline Moments<F> moments(const AdamWConstants& k, F param, F g, F m_old, F v_old) {
  const F m = m_old + k.one_minus_beta1 * (g - m_old);  // lerp(m, g, 1 - beta1), as PyTorch
  const F v = k.beta2 * v_old + k.one_minus_beta2 * g * g;
  return {m, v, param * k.decay};
}

// The parameter after this step, from its moments and sqrt(v).
template <class F>
[[gnu::always_inline]] inline F stepped(const AdamWConstants& k, const Moments<F>& x, F sqrt_v) {
  return x.decayed - k.step_size * x.m / (sqrt_v * k.inv_bc2_sqrt + k.eps);
}

// Each path's correctly rounded vector square root (the one instruction generic vectors lack).
[[gnu::always_inline]] inline detail::f32xN sqrt_baseline(detail::f32xN x) { return detail::sqrt_vec(x); }
#if defined(__x86_64__)
[[gnu::always_inline, gnu::target("avx2")]] inline f32x8 sqrt_avx2(f32x8 x) {
  return reinterpret_cast<f32x8>(_mm256_sqrt_ps(reinterpret_cast<__m256>(x)));
}
// The masked form with every lane selected: GCC 12's _mm512_sqrt_ps starts from an undefined vector, which
// -Wmaybe-uninitialized reports once inlined.
[[gnu::always_inline, gnu::target("avx512f")]] inline f32x16 sqrt_avx512(f32x16 x) {
  const __m512 v = reinterpret_cast<__m512>(x);
  return reinterpret_cast<f32x16>(_mm512_mask_sqrt_ps(v, static_cast<__mmask16>(0xFFFF), v));
}
#endif

// One vector of lanes at element i; `range` runs elements [begin, end) (vectors, then the tail one lane at a time),
// `update` a whole tensor over the OpenMP team (a macro, not a template: OpenMP outlines a parallel region into a
// function that takes the target of the function it is written in).
#define CLEAVE_ADAMW_PATHS(suffix, F, lanes, ...)                                                                 \
  __VA_ARGS__ void lanes_##suffix(const AdamWConstants& k, float* param, const float* grad, float* m, float* v,    \
                                  int64_t i) {                                                                    \
    const Moments<F> x = moments(k, load<F>(param + i), load<F>(grad + i), load<F>(m + i), load<F>(v + i));       \
    store(m + i, x.m);                                                                                            \
    store(v + i, x.v);                                                                                            \
    store(param + i, stepped(k, x, sqrt_##suffix(x.v)));                                                          \
  }                                                                                                               \
  __VA_ARGS__ void range_##suffix(const AdamWConstants& k, float* param, const float* grad, float* m, float* v,    \
                                  int64_t begin, int64_t end) {                                                   \
    int64_t i = begin;                                                                                            \
    for (; i + (lanes) <= end; i += (lanes)) lanes_##suffix(k, param, grad, m, v, i);                             \
    for (; i < end; ++i) {                                                                                        \
      const Moments<F> x = moments(k, broadcast<F>(param[i]), broadcast<F>(grad[i]), broadcast<F>(m[i]),          \
                                   broadcast<F>(v[i]));                                                           \
      m[i] = x.m[0];                                                                                              \
      v[i] = x.v[0];                                                                                              \
      param[i] = stepped(k, x, sqrt_##suffix(x.v))[0];                                                            \
    }                                                                                                             \
  }                                                                                                               \
  __VA_ARGS__ void update_##suffix(const AdamWConstants& k, float* param, const float* grad, float* m, float* v,   \
                                   int64_t n) {                                                                   \
    const int64_t vectors = n / (lanes);                                                                          \
    CLEAVE_PARALLEL_FOR(vi, vectors, detail::worth_parallel(n), lanes_##suffix(k, param, grad, m, v, vi * (lanes));) \
    range_##suffix(k, param, grad, m, v, vectors * (lanes), n);                                                   \
  }

CLEAVE_ADAMW_PATHS(baseline, detail::f32xN, detail::kLanes, __attribute__((optimize("fp-contract=off"))))
#if defined(__x86_64__)
CLEAVE_ADAMW_PATHS(avx2, f32x8, 8, __attribute__((target("avx2"), optimize("fp-contract=off"))))
CLEAVE_ADAMW_PATHS(avx512, f32x16, 16, __attribute__((target("avx512f"), optimize("fp-contract=off"))))
#endif
#undef CLEAVE_ADAMW_PATHS

using RangeFn = void(const AdamWConstants&, float*, const float*, float*, float*, int64_t, int64_t);
using UpdateFn = void(const AdamWConstants&, float*, const float*, float*, float*, int64_t);

void check_hyper(float beta1, float beta2, float eps, int64_t step) {
  CLEAVE_ASSERT(step >= 1, "adamw_update: step is the 1-based update count, got {}", step);
  CLEAVE_CHECK(beta1 >= 0.0f && beta1 < 1.0f && beta2 >= 0.0f && beta2 < 1.0f,
               "adamw: betas must be in [0, 1), got ({}, {})", beta1, beta2);
  CLEAVE_CHECK(eps > 0.0f, "adamw: eps must be > 0, got {}", eps);
}

}  // namespace

void adamw_update_isa(VectorIsa isa, float* param, const float* grad, float* m, float* v, int64_t n, float lr,
                      float beta1, float beta2, float eps, float weight_decay, int64_t step) {
  CLEAVE_ASSERT(n >= 0, "adamw_update: negative size {}", n);
  check_hyper(beta1, beta2, eps, step);
  UpdateFn* const update = isa_path(isa, "adamw_update", CLEAVE_ISA_PATHS(update));
  update(kernels::adamw_constants(lr, beta1, beta2, eps, weight_decay, step), param, grad, m, v, n);
}

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                  float eps, float weight_decay, int64_t step) {
  adamw_update_isa(best_vector_isa(), param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, step);
}

void adamw_update_many_isa(VectorIsa isa, const AdamWTensor* tensors, int64_t count, float lr, float beta1,
                           float beta2, float eps, int64_t step) {
  CLEAVE_ASSERT(count >= 0, "adamw_update_many: negative tensor count {}", count);
  check_hyper(beta1, beta2, eps, step);
  RangeFn* const range = isa_path(isa, "adamw_update_many", CLEAVE_ISA_PATHS(range));
  int64_t total = 0;
  for (int64_t t = 0; t < count; ++t) {
    CLEAVE_ASSERT(tensors[t].n >= 0, "adamw_update_many: tensor {} has negative size {}", t, tensors[t].n);
    total += tensors[t].n;
  }
  detail::for_each_piece(
      count, [&](int64_t t) { return tensors[t].n; }, detail::worth_parallel(total),
      [&](int64_t t, int64_t begin, int64_t end) {
        const AdamWTensor& x = tensors[t];
        const AdamWConstants k = kernels::adamw_constants(lr, beta1, beta2, eps, x.weight_decay, step);
        range(k, x.param, x.grad, x.m, x.v, begin, end);
      });
}

void adamw_update_many(const AdamWTensor* tensors, int64_t count, float lr, float beta1, float beta2, float eps,
                       int64_t step) {
  adamw_update_many_isa(best_vector_isa(), tensors, count, lr, beta1, beta2, eps, step);
}

}  // namespace cleave::kernels::cpu
