// LayerNorm over the last dimension of a [rows, cols] tensor on the GPU (twins of kernels/cpu/layernorm.hpp).
//
// Invariant: forward writes y, mean[rows] and rstd[rows] = 1/sqrt(var + eps) (biased variance, two-pass as on
// the CPU); backward_input overwrites dx (dx may alias dy); backward_weight ACCUMULATES (+=) into dgamma and
// dbeta, deterministically (fixed row chunks in the caller's workspace, added in order). One warp per row for
// forward and backward_input. x, gamma, beta, y, dy and dx are f32 or bf16 views (floats.hpp); statistics,
// sums and dgamma/dbeta are f32, as the CPU backend's bf16 path. Launch on `stream`, no host wait; device
// pointers owned by the caller.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/floats.hpp"

namespace cleave::kernels::cuda {

void layernorm_forward(ConstFloats x, ConstFloats gamma, ConstFloats beta, Floats y, float* mean, float* rstd,
                       int64_t rows, int64_t cols, float eps, cudaStream_t stream);

void layernorm_backward_input(ConstFloats dy, ConstFloats x, ConstFloats gamma, const float* mean, const float* rstd,
                              Floats dx, int64_t rows, int64_t cols, cudaStream_t stream);

// workspace: layernorm_backward_weight_workspace_size(rows, cols) bytes.
std::size_t layernorm_backward_weight_workspace_size(int64_t rows, int64_t cols);
void layernorm_backward_weight(ConstFloats dy, ConstFloats x, const float* mean, const float* rstd, float* dgamma,
                               float* dbeta, int64_t rows, int64_t cols, void* workspace, std::size_t workspace_bytes,
                               cudaStream_t stream);

namespace detail {
cudaError_t launch_layernorm_forward(ConstFloats x, ConstFloats gamma, ConstFloats beta, Floats y, float* mean,
                                     float* rstd, int64_t rows, int64_t cols, float eps, cudaStream_t stream);
cudaError_t launch_layernorm_backward_input(ConstFloats dy, ConstFloats x, ConstFloats gamma, const float* mean,
                                            const float* rstd, Floats dx, int64_t rows, int64_t cols,
                                            cudaStream_t stream);
cudaError_t launch_layernorm_backward_weight(ConstFloats dy, ConstFloats x, const float* mean, const float* rstd,
                                             float* dgamma, float* dbeta, int64_t rows, int64_t cols, float* partials,
                                             cudaStream_t stream);
}  // namespace detail

}  // namespace cleave::kernels::cuda
