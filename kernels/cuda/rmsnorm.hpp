// RMSNorm over the last dimension of a [rows, cols] tensor on the GPU (the CUDA side of ops::rmsnorm_*; the
// CPU twin is the CPU backend's slot).
//
// Invariant: forward writes y = x * rstd * weight and rstd[rows] = 1/sqrt(mean(x^2) + eps) (f32); backward_input
// overwrites dx = rstd * (g - x * rstd^2 * mean(g * x)), g = dy * weight (dx may alias dy); backward_weight
// ACCUMULATES (+=) dweight[c] += sum over rows of dy * x * rstd, deterministically (fixed row chunks in the
// caller's workspace, added in chunk order: the bias_backward scheme, bias.hpp). One warp per row for forward
// and backward_input. x, weight, y, dy and dx are f32 or bf16 views (floats.hpp: f32 arithmetic, one rounding
// per store); rstd and dweight are f32. Launch on `stream`, no host wait; device pointers owned by the caller.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/floats.hpp"

namespace cleave::kernels::cuda {

void rmsnorm_forward(ConstFloats x, ConstFloats weight, Floats y, float* rstd, int64_t rows, int64_t cols, float eps,
                     cudaStream_t stream);

void rmsnorm_backward_input(ConstFloats dy, ConstFloats x, ConstFloats weight, const float* rstd, Floats dx,
                            int64_t rows, int64_t cols, cudaStream_t stream);

// The residual add fused in (ops.hpp add_rmsnorm_*), bit for bit the unfused pair on this backend (the add kernel,
// then the kernels above): forward stores r = x + y (r may alias x or y) and normalises the row from r as stored
// (its bf16 rounding included), with the same warp sums; backward_input stores dx = rmsnorm_backward_input's value
// rounded to dx's type, plus dres, rounded again (dx may alias dres).
void add_rmsnorm_forward(ConstFloats x, ConstFloats y, ConstFloats weight, Floats r, Floats out, float* rstd,
                         int64_t rows, int64_t cols, float eps, cudaStream_t stream);
void add_rmsnorm_backward_input(ConstFloats dy, ConstFloats dres, ConstFloats x, ConstFloats weight,
                                const float* rstd, Floats dx, int64_t rows, int64_t cols, cudaStream_t stream);

// workspace: rmsnorm_backward_weight_workspace_size(rows, cols) bytes.
std::size_t rmsnorm_backward_weight_workspace_size(int64_t rows, int64_t cols);
void rmsnorm_backward_weight(ConstFloats dy, ConstFloats x, const float* rstd, float* dweight, int64_t rows,
                             int64_t cols, void* workspace, std::size_t workspace_bytes, cudaStream_t stream);

namespace detail {
cudaError_t launch_rmsnorm_forward(ConstFloats x, ConstFloats weight, Floats y, float* rstd, int64_t rows,
                                   int64_t cols, float eps, cudaStream_t stream);
cudaError_t launch_rmsnorm_backward_input(ConstFloats dy, ConstFloats x, ConstFloats weight, const float* rstd,
                                          Floats dx, int64_t rows, int64_t cols, cudaStream_t stream);
cudaError_t launch_add_rmsnorm_forward(ConstFloats x, ConstFloats y, ConstFloats weight, Floats r, Floats out,
                                       float* rstd, int64_t rows, int64_t cols, float eps, cudaStream_t stream);
cudaError_t launch_add_rmsnorm_backward_input(ConstFloats dy, ConstFloats dres, ConstFloats x, ConstFloats weight,
                                              const float* rstd, Floats dx, int64_t rows, int64_t cols,
                                              cudaStream_t stream);
cudaError_t launch_rmsnorm_backward_weight(ConstFloats dy, ConstFloats x, const float* rstd, float* dweight,
                                           int64_t rows, int64_t cols, float* partials, cudaStream_t stream);
}  // namespace detail

}  // namespace cleave::kernels::cuda
