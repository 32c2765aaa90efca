// SwiGLU forward / backward. See swiglu.hpp. Element-wise, so parallel over elements with the same arithmetic
// for every element: sigmoid as 1 / (1 + exp(-g)) with vec_math.hpp's exp_vec.
//
// Why vectorised, and why several paths: with libm's scalar expf the two SwiGLU passes were 12% of the Llama
// example's training step (perf, issue 39; the MLP activations are the largest element-wise tensors of a Llama
// block). The body is written once over generic vectors, like gelu.cpp: the baseline path (the build's own
// vectors), AVX2 (8 lanes) and AVX-512 (16 lanes), chosen at run time from the CPU. Every path performs the same
// IEEE operations on each element in the same order, without contraction into FMA (fp-contract=off), and the
// tail runs the same vector code on a one-lane broadcast, so all paths give the same bits
// (KernelSwiglu.EveryIsaPathGivesTheSameBits) and the thread count never changes a result.
#include "kernels/cpu/swiglu.hpp"

// Wide vectors never cross a call boundary here (the helpers are always_inline), so the ABI note GCC emits for
// 32- and 64-byte vector arguments without AVX does not apply (before vec_math.hpp, where it is reported).
#pragma GCC diagnostic ignored "-Wpsabi"

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

template <class F>
[[gnu::always_inline]] inline F sigmoid_vec(F g) {
  return 1.0f / (1.0f + detail::exp_vec(-g));
}

template <class F>
[[gnu::always_inline]] inline void forward_one(const float* gate, const float* up, float* h, int64_t i) {
  const F g = load<F>(gate + i);
  store(h + i, g * sigmoid_vec(g) * load<F>(up + i));
}

template <class F>
[[gnu::always_inline]] inline void backward_vec(F g, F u, F d, F& dg, F& du) {
  const F s = sigmoid_vec(g);
  const F silu = g * s;
  dg = d * u * (s * (1.0f + g * (1.0f - s)));
  du = d * silu;
}

// The loops are spelled out per path (a macro, not a template) because OpenMP outlines a parallel region into a
// function that takes the target of the function it is written in.
#define CLEAVE_SWIGLU_PATHS(suffix, F, lanes, ...)                                                              \
  __VA_ARGS__ void forward_##suffix(const float* gate, const float* up, float* h, int64_t n) {                  \
    const int64_t vectors = n / (lanes);                                                                        \
    CLEAVE_PARALLEL_FOR(v, vectors, detail::worth_parallel(n), forward_one<F>(gate, up, h, v * (lanes));)       \
    for (int64_t i = vectors * (lanes); i < n; ++i) {                                                           \
      const F g = broadcast<F>(gate[i]);                                                                        \
      h[i] = (g * sigmoid_vec(g) * broadcast<F>(up[i]))[0];                                                     \
    }                                                                                                           \
  }                                                                                                             \
  __VA_ARGS__ void backward_##suffix(const float* gate, const float* up, const float* dh, float* dgate,         \
                                     float* dup, int64_t n) {                                                   \
    const int64_t vectors = n / (lanes);                                                                        \
    CLEAVE_PARALLEL_FOR(v, vectors, detail::worth_parallel(n),                                                  \
      const int64_t i = v * (lanes);                                                                            \
      F dg, du;                                                                                                 \
      backward_vec(load<F>(gate + i), load<F>(up + i), load<F>(dh + i), dg, du);                                \
      store(dgate + i, dg);                                                                                     \
      store(dup + i, du);)                                                                                      \
    for (int64_t i = vectors * (lanes); i < n; ++i) {                                                           \
      F dg, du;                                                                                                 \
      backward_vec(broadcast<F>(gate[i]), broadcast<F>(up[i]), broadcast<F>(dh[i]), dg, du);                    \
      dgate[i] = dg[0];                                                                                         \
      dup[i] = du[0];                                                                                           \
    }                                                                                                           \
  }

CLEAVE_SWIGLU_PATHS(baseline, detail::f32xN, static_cast<int64_t>(sizeof(detail::f32xN) / 4),
                    __attribute__((optimize("fp-contract=off"))))
#if defined(__x86_64__)
CLEAVE_SWIGLU_PATHS(avx2, f32x8, 8, __attribute__((target("avx2"), optimize("fp-contract=off"))))
CLEAVE_SWIGLU_PATHS(avx512, f32x16, 16, __attribute__((target("avx512f"), optimize("fp-contract=off"))))
#endif
#undef CLEAVE_SWIGLU_PATHS

}  // namespace

void swiglu_forward_isa(VectorIsa isa, const float* gate, const float* up, float* h, int64_t n) {
  CLEAVE_ASSERT(n >= 0, "swiglu_forward: negative size {}", n);
  isa_path(isa, "swiglu_forward", CLEAVE_ISA_PATHS(forward))(gate, up, h, n);
}

void swiglu_backward_isa(VectorIsa isa, const float* gate, const float* up, const float* dh, float* dgate,
                         float* dup, int64_t n) {
  CLEAVE_ASSERT(n >= 0, "swiglu_backward: negative size {}", n);
  isa_path(isa, "swiglu_backward", CLEAVE_ISA_PATHS(backward))(gate, up, dh, dgate, dup, n);
}

void swiglu_forward(const float* gate, const float* up, float* h, int64_t n) {
  swiglu_forward_isa(best_vector_isa(), gate, up, h, n);
}

void swiglu_backward(const float* gate, const float* up, const float* dh, float* dgate, float* dup, int64_t n) {
  swiglu_backward_isa(best_vector_isa(), gate, up, dh, dgate, dup, n);
}

}  // namespace cleave::kernels::cpu
