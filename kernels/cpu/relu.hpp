// ReLU: y = max(x, 0). The gradient at exactly 0 is taken as 0 (as PyTorch).
//
// Invariant: forward writes y (may alias x); backward overwrites dx (may alias dy).
#pragma once

#include <cstdint>

namespace cleave::kernels::cpu {

void relu_forward(const float* x, float* y, int64_t n);
void relu_backward(const float* x, const float* dy, float* dx, int64_t n);

}  // namespace cleave::kernels::cpu
