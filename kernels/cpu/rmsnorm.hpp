// RMSNorm over the last dimension of a [rows, cols] tensor (Llama's norm; no mean, no bias).
//
// Invariant: forward writes y and rstd[rows] = 1 / sqrt(mean(x^2) + eps); backward_input overwrites dx;
// backward_weight ACCUMULATES (+=) into dweight. Statistics are f32, and a row's sum is split into 16 lane sums
// (lane l holds the columns c = l mod 16, in column order) added in a fixed tree: the same order on every
// instruction-set path and thread count, so every path gives the same bits (rmsnorm.cpp).
#pragma once

#include <cstdint>

#include "kernels/cpu/vector_isa.hpp"

namespace cleave::kernels::cpu {

void rmsnorm_forward(const float* x, const float* weight, float* y, float* rstd, int64_t rows, int64_t cols,
                     float eps);

// dx = rstd * (dy * w) - x * rstd^3 / cols * sum_c(dy * w * x)
void rmsnorm_backward_input(const float* dy, const float* x, const float* weight, const float* rstd, float* dx,
                            int64_t rows, int64_t cols);

// dweight[c] += sum over rows of dy * x * rstd (rows in order per column block: deterministic).
void rmsnorm_backward_weight(const float* dy, const float* x, const float* rstd, float* dweight, int64_t rows,
                             int64_t cols);
// The same from bf16 dy and x (bit patterns, cast.hpp), widened a row segment at a time: the bits of the f32
// function over the widened tensors.
void rmsnorm_backward_weight(const std::uint16_t* dy, const std::uint16_t* x, const float* rstd, float* dweight,
                             int64_t rows, int64_t cols);

// The residual add fused in (a pre-norm block's x1 = x + branch; norm(x1)), bit for bit the unfused pair:
// forward: r = x + y (written; may alias x or y), then out and rstd as rmsnorm_forward(r) writes them.
// backward_input: dx = rmsnorm_backward_input(dy, x, ...) + dres (the f32 sum of the two; dx may alias dres).
// The weight gradient is rmsnorm_backward_weight's (with x = r).
void add_rmsnorm_forward(const float* x, const float* y, const float* weight, float* r, float* out, float* rstd,
                         int64_t rows, int64_t cols, float eps);
void add_rmsnorm_backward_input(const float* dy, const float* dres, const float* x, const float* weight,
                                const float* rstd, float* dx, int64_t rows, int64_t cols);

// One vector path (vector_isa.hpp); the functions above run the widest. For tests and benchmarks.
void rmsnorm_forward_isa(VectorIsa isa, const float* x, const float* weight, float* y, float* rstd, int64_t rows,
                         int64_t cols, float eps);
void rmsnorm_backward_input_isa(VectorIsa isa, const float* dy, const float* x, const float* weight,
                                const float* rstd, float* dx, int64_t rows, int64_t cols);
void rmsnorm_backward_weight_isa(VectorIsa isa, const float* dy, const float* x, const float* rstd, float* dweight,
                                 int64_t rows, int64_t cols);
void rmsnorm_backward_weight_isa(VectorIsa isa, const std::uint16_t* dy, const std::uint16_t* x, const float* rstd,
                                 float* dweight, int64_t rows, int64_t cols);
void add_rmsnorm_forward_isa(VectorIsa isa, const float* x, const float* y, const float* weight, float* r,
                             float* out, float* rstd, int64_t rows, int64_t cols, float eps);
void add_rmsnorm_backward_input_isa(VectorIsa isa, const float* dy, const float* dres, const float* x,
                                    const float* weight, const float* rstd, float* dx, int64_t rows, int64_t cols);

}  // namespace cleave::kernels::cpu
