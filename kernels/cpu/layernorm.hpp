// LayerNorm over the last dimension of a [rows, cols] tensor, with saved statistics.
//
// Invariant: forward writes y, mean[rows] and rstd[rows] = 1/sqrt(var + eps) (biased variance, as PyTorch);
// backward_input overwrites dx; backward_weight ACCUMULATES (+=) into dgamma and dbeta.
#pragma once

#include <cstdint>

#include "kernels/cpu/vector_isa.hpp"

namespace cleave::kernels::cpu {

void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                       int64_t rows, int64_t cols, float eps);

void layernorm_backward_input(const float* dy, const float* x, const float* gamma, const float* mean, const float* rstd,
                              float* dx, int64_t rows, int64_t cols);

void layernorm_backward_weight(const float* dy, const float* x, const float* mean, const float* rstd, float* dgamma,
                               float* dbeta, int64_t rows, int64_t cols);
// The forward and input gradient on a chosen instruction-set path (tests, benchmarks); every path gives the same bits.
void layernorm_forward_isa(VectorIsa isa, const float* x, const float* gamma, const float* beta, float* y,
                           float* mean, float* rstd, int64_t rows, int64_t cols, float eps);
void layernorm_backward_input_isa(VectorIsa isa, const float* dy, const float* x, const float* gamma,
                                  const float* mean, const float* rstd, float* dx, int64_t rows, int64_t cols);
// The same from bf16 dy and x (bit patterns, cast.hpp), widened a row segment at a time: the bits of the f32
// function over the widened tensors.
void layernorm_backward_weight(const std::uint16_t* dy, const std::uint16_t* x, const float* mean, const float* rstd,
                               float* dgamma, float* dbeta, int64_t rows, int64_t cols);
// The weight gradient on a chosen instruction-set path (tests, benchmarks); every path gives the same bits.
void layernorm_backward_weight_isa(VectorIsa isa, const float* dy, const float* x, const float* mean,
                                   const float* rstd, float* dgamma, float* dbeta, int64_t rows, int64_t cols);
void layernorm_backward_weight_isa(VectorIsa isa, const std::uint16_t* dy, const std::uint16_t* x, const float* mean,
                                   const float* rstd, float* dgamma, float* dbeta, int64_t rows, int64_t cols);

}  // namespace cleave::kernels::cpu
