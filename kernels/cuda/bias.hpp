// Bias add for a [rows, cols] activation and its gradient on the GPU (twins of kernels/cpu/bias.hpp).
//
// Invariant (llm.c convention): activations are updated in place, parameter gradients are accumulated (+=).
// y, bias and dy are f32 or bf16 views (floats.hpp: f32 arithmetic, one rounding per store); dbias is f32.
// bias_backward is deterministic: each column is summed over fixed row chunks into the caller's workspace and
// the chunks are added in order, so the bits depend on the shape only. Launch on `stream`, no host wait.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/floats.hpp"

namespace cleave::kernels::cuda {

// y[r, c] += bias[c], in place.
void bias_add_forward(Floats y, ConstFloats bias, int64_t rows, int64_t cols, cudaStream_t stream);

// dbias[c] += sum_r dy[r, c]. workspace: bias_backward_workspace_size(rows, cols) bytes.
std::size_t bias_backward_workspace_size(int64_t rows, int64_t cols);
void bias_backward(ConstFloats dy, float* dbias, int64_t rows, int64_t cols, void* workspace,
                   std::size_t workspace_bytes, cudaStream_t stream);

namespace detail {
// Row chunks of the deterministic column reductions (bias, layernorm weights): a function of rows only.
int64_t column_reduction_chunks(int64_t rows);
cudaError_t launch_bias_add_forward(Floats y, ConstFloats bias, int64_t rows, int64_t cols, cudaStream_t stream);
cudaError_t launch_bias_backward(ConstFloats dy, float* dbias, int64_t rows, int64_t cols, float* partials,
                                 cudaStream_t stream);
}  // namespace detail

}  // namespace cleave::kernels::cuda
