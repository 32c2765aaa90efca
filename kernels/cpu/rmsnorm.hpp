// RMSNorm over the last dimension of a [rows, cols] tensor (Llama's norm; no mean, no bias).
//
// Invariant: forward writes y and rstd[rows] = 1 / sqrt(mean(x^2) + eps); backward_input overwrites dx;
// backward_weight ACCUMULATES (+=) into dweight. Statistics are f32 and summed in column order per row.
#pragma once

#include <cstdint>

namespace cleave::kernels::cpu {

void rmsnorm_forward(const float* x, const float* weight, float* y, float* rstd, int64_t rows, int64_t cols,
                     float eps);

// dx = rstd * (dy * w) - x * rstd^3 / cols * sum_c(dy * w * x)
void rmsnorm_backward_input(const float* dy, const float* x, const float* weight, const float* rstd, float* dx,
                            int64_t rows, int64_t cols);

// dweight[c] += sum over rows of dy * x * rstd (rows in order per column block: deterministic).
void rmsnorm_backward_weight(const float* dy, const float* x, const float* rstd, float* dweight, int64_t rows,
                             int64_t cols);

}  // namespace cleave::kernels::cpu
