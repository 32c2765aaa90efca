// AdamW on f32 master weights on the GPU (twin of kernels/cpu/adamw.hpp; torch.optim.AdamW semantics):
//   param -= lr * weight_decay * param
//   m = beta1 m + (1 - beta1) g;   v = beta2 v + (1 - beta2) g^2
//   param -= lr * (m / (1 - beta1^step)) / (sqrt(v / (1 - beta2^step)) + eps)
//
// Invariant: the same constants (computed on the host in double, as the CPU kernel does) and the same
// operation order with correctly rounded f32 intrinsics (no fused multiply-add), so each element matches the
// CPU kernel. grad is f32 or bf16 (widened exactly). m and v are the caller's state (zero before step 1),
// updated in place. When param_bf16 is not null, the updated master weight is also written there rounded to
// bf16 (the copy the bf16 GEMMs read).
// Launch on `stream`, no host wait; device pointers owned by the caller.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/adamw_constants.hpp"
#include "kernels/cuda/floats.hpp"

namespace cleave::kernels::cuda {

void adamw_update(float* param, ConstFloats grad, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                  float eps, float weight_decay, int64_t step, __nv_bfloat16* param_bf16, cudaStream_t stream);

namespace detail {
cudaError_t launch_adamw_update(const AdamWConstants& k, float* param, ConstFloats grad, float* m, float* v, int64_t n,
                                __nv_bfloat16* param_bf16, cudaStream_t stream);
}  // namespace detail

}  // namespace cleave::kernels::cuda
