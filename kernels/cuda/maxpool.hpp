// 2-D max pooling, NCHW, square window, no padding, on the GPU (twin of kernels/cpu/maxpool.hpp):
// H' = (H - window) / stride + 1 (likewise W').
//
// Invariant: forward writes y and argmax (the flat index h*W + w of the chosen input inside its [H, W] plane;
// ties go to the first in row-major order, exactly as the CPU kernel: cuDNN's pooling keeps no arg-max, so
// this is a small kernel of our own). backward overwrites dx: each input element gathers, in ascending output
// order, the dy of every output whose argmax points at it, starting from 0 — the CPU's scatter-add order —
// so f32 results are bit-identical to the CPU's and no atomics are needed. x, y, dy, dx are f32 or bf16
// (FloatType; bf16 read widened, written rounded). Launch on `stream`, no host wait.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/float_type.hpp"

namespace cleave::kernels::cuda {

struct PoolShape {
  int64_t batch = 0, channels = 0, height = 0, width = 0, window = 1, stride = 1;
  int64_t out_height() const { return (height - window) / stride + 1; }
  int64_t out_width() const { return (width - window) / stride + 1; }
};

void maxpool2d_forward(const void* x, void* y, FloatType type, int32_t* argmax, const PoolShape& shape,
                       cudaStream_t stream);
void maxpool2d_backward(const void* dy, void* dx, FloatType type, const int32_t* argmax, const PoolShape& shape,
                        cudaStream_t stream);

namespace detail {
cudaError_t launch_maxpool2d_forward(const void* x, void* y, FloatType type, int32_t* argmax, const PoolShape& shape,
                                     cudaStream_t stream);
cudaError_t launch_maxpool2d_backward(const void* dy, void* dx, FloatType type, const int32_t* argmax,
                                      const PoolShape& shape, cudaStream_t stream);
}  // namespace detail

}  // namespace cleave::kernels::cuda
