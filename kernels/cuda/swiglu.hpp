// SwiGLU gating on the GPU (the CUDA side of ops::swiglu_*; the CPU twin is the CPU backend's slot):
// h = silu(gate) * up with silu(g) = g * sigmoid(g), sigmoid(g) = 1 / (1 + exp(-g)).
//
// Invariant: forward writes h (may alias gate or up element for element); backward overwrites
// dup = dh * silu(gate) and dgate = dh * up * sigmoid(gate) * (1 + gate * (1 - sigmoid(gate))), which may not alias
// gate, up or dh (the seam's rule). Every tensor is an f32 or bf16 view (floats.hpp: f32 arithmetic with expf,
// one rounding per store). Launch on `stream`, no host wait; device pointers owned by the caller.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/floats.hpp"

namespace cleave::kernels::cuda {

void swiglu_forward(ConstFloats gate, ConstFloats up, Floats h, int64_t n, cudaStream_t stream);
void swiglu_backward(ConstFloats gate, ConstFloats up, ConstFloats dh, Floats dgate, Floats dup, int64_t n,
                     cudaStream_t stream);

namespace detail {
cudaError_t launch_swiglu_forward(ConstFloats gate, ConstFloats up, Floats h, int64_t n, cudaStream_t stream);
cudaError_t launch_swiglu_backward(ConstFloats gate, ConstFloats up, ConstFloats dh, Floats dgate, Floats dup,
                                   int64_t n, cudaStream_t stream);
}  // namespace detail

}  // namespace cleave::kernels::cuda
