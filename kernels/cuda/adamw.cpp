// Checked entry point for the AdamW kernel (adamw.hpp): the host constants of kernels/adamw_constants.hpp, shared
// with kernels/cpu/adamw.cpp.
#include "kernels/cuda/adamw.hpp"

#include "engine/cuda/cuda_check.hpp"

namespace cleave::kernels::cuda {

void adamw_update(float* param, ConstFloats grad, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                  float eps, float weight_decay, int64_t step, __nv_bfloat16* param_bf16, cudaStream_t stream) {
  CLEAVE_ASSERT(n >= 0, "cuda adamw_update: negative size {}", n);
  CLEAVE_ASSERT(step >= 1, "cuda adamw_update: step is the 1-based update count, got {}", step);
  CLEAVE_CHECK(beta1 >= 0.0f && beta1 < 1.0f && beta2 >= 0.0f && beta2 < 1.0f,
               "adamw: betas must be in [0, 1), got ({}, {})", beta1, beta2);
  CLEAVE_CHECK(eps > 0.0f, "adamw: eps must be > 0, got {}", eps);
  const AdamWConstants k = adamw_constants(lr, beta1, beta2, eps, weight_decay, step);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_adamw_update(k, param, grad, m, v, n, param_bf16, stream), "adamw_kernel");
}

}  // namespace cleave::kernels::cuda
