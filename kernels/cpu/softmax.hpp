// Row-wise softmax over a [rows, cols] tensor (max-subtracted, so large logits do not overflow).
//
// Invariant: forward writes y (may alias x); backward overwrites dx = y * (dy - sum(dy * y)) (may alias dy).
#pragma once

#include <cstdint>

namespace cleave::kernels::cpu {

void softmax_forward(const float* x, float* y, int64_t rows, int64_t cols);
void softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols);

}  // namespace cleave::kernels::cpu
