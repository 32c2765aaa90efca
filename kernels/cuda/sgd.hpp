// SGD with momentum on f32 master weights on the GPU (twin of kernels/cpu/sgd.hpp; torch.optim.SGD, dampening 0):
//   g = grad + weight_decay * param
//   if momentum != 0:  buf = first_step ? g : momentum * buf + g;   g = nesterov ? g + momentum * buf : buf
//   param -= lr * g
//
// Invariant: the CPU kernel's operation order with correctly rounded f32 intrinsics (no fused multiply-add; the
// CPU build does not contract either), so each element matches the CPU kernel bit for bit. grad is f32 or
// bf16 (widened exactly); momentum_buf may be null when momentum == 0. Launch on `stream`, no host wait.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/floats.hpp"

namespace cleave::kernels::cuda {

void sgd_update(float* param, ConstFloats grad, float* momentum_buf, int64_t n, float lr, float momentum,
                float weight_decay, bool nesterov, bool first_step, cudaStream_t stream);

namespace detail {
cudaError_t launch_sgd_update(float* param, ConstFloats grad, float* momentum_buf, int64_t n, float lr, float momentum,
                              float weight_decay, bool nesterov, bool first_step, cudaStream_t stream);
}  // namespace detail

}  // namespace cleave::kernels::cuda
