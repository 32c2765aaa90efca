// GELU, tanh approximation as in GPT-2, on the GPU (twins of kernels/cpu/gelu.hpp):
// y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
//
// Invariant: forward writes y (may alias x); backward overwrites dx with dy * gelu'(x) (dx may alias dy).
// Tensors are f32 or bf16 views (floats.hpp: f32 arithmetic, one rounding per store). Launch on `stream`, no host
// wait; device pointers owned by the caller.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/floats.hpp"

namespace cleave::kernels::cuda {

void gelu_forward(ConstFloats x, Floats y, int64_t n, cudaStream_t stream);
void gelu_backward(ConstFloats x, ConstFloats dy, Floats dx, int64_t n, cudaStream_t stream);

namespace detail {
cudaError_t launch_gelu_forward(ConstFloats x, Floats y, int64_t n, cudaStream_t stream);
cudaError_t launch_gelu_backward(ConstFloats x, ConstFloats dy, Floats dx, int64_t n, cudaStream_t stream);
}  // namespace detail

}  // namespace cleave::kernels::cuda
