// Bias add for a [rows, cols] activation and its gradient.
//
// Invariant (llm.c convention): activations are written (=) or updated in place, parameter gradients are
// accumulated (+=), so several micro-batches can add into one gradient buffer.
#pragma once

#include <cstdint>

#include "kernels/cpu/vector_isa.hpp"

namespace cleave::kernels::cpu {

// y[r, c] += bias[c], in place.
void bias_add_forward(float* y, const float* bias, int64_t rows, int64_t cols);

// dbias[c] += sum_r dy[r, c].
void bias_backward(const float* dy, float* dbias, int64_t rows, int64_t cols);
// The same from a bf16 dy (bit patterns, cast.hpp), widened a row segment at a time: the bits of bias_backward
// over the widened tensor.
void bias_backward(const std::uint16_t* dy, float* dbias, int64_t rows, int64_t cols);

// The same on a chosen instruction-set path (tests, benchmarks); every path gives the same bits.
void bias_add_forward_isa(VectorIsa isa, float* y, const float* bias, int64_t rows, int64_t cols);
void bias_backward_isa(VectorIsa isa, const float* dy, float* dbias, int64_t rows, int64_t cols);
void bias_backward_isa(VectorIsa isa, const std::uint16_t* dy, float* dbias, int64_t rows, int64_t cols);

}  // namespace cleave::kernels::cpu
