// 2-D convolution, NCHW, square kernel, via im2col + GEMM (one image at a time).
//
// w is [out_channels, in_channels, kernel, kernel]; x is [batch, in_channels, height, width]; y is
// [batch, out_channels, out_height, out_width]. The caller allocates the im2col workspace of
// conv2d_workspace_floats(s) floats (one image; nothing allocates behind its back).
// Invariant: forward writes y; backward_input overwrites dx; backward_weight ACCUMULATES (+=) into dw
// and dbias (dbias and bias may be null).
#pragma once

#include <cstdint>

#include "kernels/cpu/gemm.hpp"

namespace cleave::kernels::cpu {

struct Conv2dShape {
  int64_t batch = 0, in_channels = 0, height = 0, width = 0, out_channels = 0, kernel = 1, stride = 1, padding = 0;
  int64_t out_height() const;  // (height + 2*padding - kernel) / stride + 1
  int64_t out_width() const;
};

// Checks the shape (positive sizes, kernel fits the padded input); CLEAVE_CHECK names the numbers.
void conv2d_check_shape(const Conv2dShape& s);

// Floats of the im2col buffer for ONE image: in_channels*kernel*kernel * out_height*out_width.
int64_t conv2d_workspace_floats(const Conv2dShape& s);

void conv2d_forward(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y,
                    float* workspace, GemmSlicing slicing = GemmSlicing::kPerThread);
void conv2d_backward_input(const Conv2dShape& s, const float* dy, const float* w, float* dx, float* workspace,
                           GemmSlicing slicing = GemmSlicing::kPerThread);
void conv2d_backward_weight(const Conv2dShape& s, const float* x, const float* dy, float* dw, float* dbias,
                            float* workspace, GemmSlicing slicing = GemmSlicing::kPerThread);

}  // namespace cleave::kernels::cpu
