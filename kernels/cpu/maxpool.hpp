// 2-D max pooling, NCHW, square window, no padding: H' = (H - window) / stride + 1 (likewise W').
//
// Invariant: forward writes y and argmax (the flat index h*W + w of the chosen input inside its
// [H, W] plane; ties go to the first in row-major order). backward overwrites dx: zero, then scatter-add
// dy through argmax (overlapping windows add).
#pragma once

#include <cstdint>

namespace cleave::kernels::cpu {

void maxpool2d_forward(const float* x, float* y, int32_t* argmax, int64_t N, int64_t C, int64_t H, int64_t W,
                       int64_t window, int64_t stride);
void maxpool2d_backward(const float* dy, const int32_t* argmax, float* dx, int64_t N, int64_t C, int64_t H, int64_t W,
                        int64_t window, int64_t stride);

}  // namespace cleave::kernels::cpu
