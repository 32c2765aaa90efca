// GELU, tanh approximation as in GPT-2: y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
//
// Computed as x / (1 + e^(-2u)) (the same function), within 6 * 2^-24 (1 + |2u log2(e)|) of it relatively on
// every float; zeros keep their sign, +inf gives +inf, -inf and NaN give NaN (the formula's -inf * 0); the
// gradient is NaN at +-inf and NaN, dy for large positive x and within 1e-35 |dy| of 0 for large negative x.
//
// Invariant: forward writes y (may alias x); backward overwrites dx with dy * gelu'(x) (dx may alias dy).
// Every instruction-set path gives the same bits (gelu.cpp), so the choice never changes a result.
#pragma once

#include <cstdint>

#include "kernels/cpu/vector_isa.hpp"

namespace cleave::kernels::cpu {

void gelu_forward(const float* x, float* y, int64_t n);
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n);

// One vector path (vector_isa.hpp); gelu_forward/backward run the widest. For tests and benchmarks.
void gelu_forward_isa(VectorIsa isa, const float* x, float* y, int64_t n);
void gelu_backward_isa(VectorIsa isa, const float* x, const float* dy, float* dx, int64_t n);

}  // namespace cleave::kernels::cpu
