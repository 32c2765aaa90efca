// SwiGLU gating (Llama's MLP): h = silu(gate) * up with silu(g) = g / (1 + exp(-g)), element-wise.
//
// Invariant: forward writes h (may alias gate or up); backward overwrites dgate and dup with
// dgate = dh * up * silu'(gate), dup = dh * silu(gate), where silu'(g) = s (1 + g (1 - s)), s = sigmoid(g).
// dgate and dup must not alias gate, up or dh. Every instruction-set path gives the same bits (swiglu.cpp), so the
// choice never changes a result.
#pragma once

#include <cstdint>

#include "kernels/cpu/vector_isa.hpp"

namespace cleave::kernels::cpu {

void swiglu_forward(const float* gate, const float* up, float* h, int64_t n);
void swiglu_backward(const float* gate, const float* up, const float* dh, float* dgate, float* dup, int64_t n);

// One vector path (vector_isa.hpp); swiglu_forward/backward run the widest. For tests and benchmarks.
void swiglu_forward_isa(VectorIsa isa, const float* gate, const float* up, float* h, int64_t n);
void swiglu_backward_isa(VectorIsa isa, const float* gate, const float* up, const float* dh, float* dgate,
                         float* dup, int64_t n);

}  // namespace cleave::kernels::cpu
