// Softmax over rows on the GPU: the row softmax of the seam (twin of kernels/cpu/softmax.hpp) and the scaled
// causal softmax of attention (the middle of kernels/cpu/attention.cpp), forward and backward.
//
// Invariant: one warp per row, f32 statistics (max, sum of exponentials, dot products) whatever the storage;
// inputs and outputs are f32 or bf16 views (floats.hpp) and may alias element for element (the causal forward
// runs in place over f32 scores). The formulas are the CPU kernels':
//   row:    y = exp(x - max) * (1 / sum);            dx = y * (dy - sum(y * dy))
//   causal: row r of a [rows, T] stack is position t = r % T; columns j <= t are live, j > t are written 0:
//           p = exp(s' - max) * (1 / sum) with s' = scale * s;   ds = p * (dp - sum(p * dp)) * scale
// Launch on `stream`, no host wait; device pointers owned by the caller.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/floats.hpp"

namespace cleave::kernels::cuda {

void softmax_forward(ConstFloats x, Floats y, int64_t rows, int64_t cols, cudaStream_t stream);
void softmax_backward(ConstFloats y, ConstFloats dy, Floats dx, int64_t rows, int64_t cols, cudaStream_t stream);

void causal_softmax_forward(ConstFloats scores, Floats probs, int64_t rows, int64_t seq, float scale,
                            cudaStream_t stream);
void causal_softmax_backward(ConstFloats probs, ConstFloats dprobs, Floats dscores, int64_t rows, int64_t seq,
                             float scale, cudaStream_t stream);

namespace detail {
// causal: rows are [.., seq] blocks and only columns <= r % seq are live (cols == seq).
cudaError_t launch_softmax_forward(ConstFloats x, Floats y, int64_t rows, int64_t cols, bool causal, float scale,
                                   cudaStream_t stream);
cudaError_t launch_softmax_backward(ConstFloats y, ConstFloats dy, Floats dx, int64_t rows, int64_t cols, bool causal,
                                    float scale, cudaStream_t stream);
}  // namespace detail

}  // namespace cleave::kernels::cuda
