// ReLU on the GPU (twins of kernels/cpu/relu.hpp): y = max(x, 0); dx = x > 0 ? dy : 0.
//
// Invariant: element-wise over n elements, outputs may alias inputs; tensors are f32 or bf16 views
// (floats.hpp), so a bf16 result equals the CPU backend's bit for bit. Launch on `stream`, no host wait.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/floats.hpp"

namespace cleave::kernels::cuda {

void relu_forward(ConstFloats x, Floats y, int64_t n, cudaStream_t stream);
void relu_backward(ConstFloats x, ConstFloats dy, Floats dx, int64_t n, cudaStream_t stream);

namespace detail {
cudaError_t launch_relu_forward(ConstFloats x, Floats y, int64_t n, cudaStream_t stream);
cudaError_t launch_relu_backward(ConstFloats x, ConstFloats dy, Floats dx, int64_t n, cudaStream_t stream);
}  // namespace detail

}  // namespace cleave::kernels::cuda
