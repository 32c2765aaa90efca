// Internal: the 8- and 16-lane float vectors of the kernels that choose an instruction-set path at run time
// (gelu.cpp, swiglu.cpp), with their unaligned load and store and a sign-keeping broadcast.
//
// Invariant: the helpers are always_inline, so a wide vector never crosses a call boundary (the file that
// includes this one may silence GCC's -Wpsabi note about 32- and 64-byte vector arguments without AVX), and
// broadcast(v) keeps -0.0 (v - 0, where the usual splat F{} + v turns -0.0 into +0.0: a tail element would
// then differ from the same value inside a full vector).
#pragma once

namespace cleave::kernels::cpu::detail {

typedef float f32x8 __attribute__((vector_size(32)));
typedef float f32x16 __attribute__((vector_size(64)));

template <class F>
[[gnu::always_inline]] inline F load(const float* p) {
  F v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
template <class F>
[[gnu::always_inline]] inline void store(float* p, F v) {
  __builtin_memcpy(p, &v, sizeof v);
}
template <class F>
[[gnu::always_inline]] inline F broadcast(float v) {
  return v - F{};
}

}  // namespace cleave::kernels::cpu::detail
