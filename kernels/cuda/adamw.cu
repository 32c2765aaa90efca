// AdamW kernel (adamw.hpp): element-wise, memory-bound (4 f32 reads, 3 writes, plus an optional bf16 write).
// Intrinsics with explicit rounding keep nvcc from contracting into FMAs, so the arithmetic is the CPU's.
#include "kernels/cuda/adamw.hpp"
#include "kernels/cuda/common.cuh"

namespace cleave::kernels::cuda::detail {
namespace {

__global__ void adamw_kernel(AdamWConstants k, float* param, ConstFloats grad, float* m, float* v, int64_t n,
                             __nv_bfloat16* param_bf16) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float g = load(grad, i);
    const float m_old = m[i];
    const float mi = __fadd_rn(m_old, __fmul_rn(k.one_minus_beta1, __fsub_rn(g, m_old)));  // lerp, as PyTorch
    const float vi = __fadd_rn(__fmul_rn(k.beta2, v[i]), __fmul_rn(__fmul_rn(k.one_minus_beta2, g), g));
    const float p = __fmul_rn(param[i], k.decay);
    const float denom = __fadd_rn(__fmul_rn(__fsqrt_rn(vi), k.inv_bc2_sqrt), k.eps);
    const float updated = __fsub_rn(p, __fdiv_rn(__fmul_rn(k.step_size, mi), denom));
    m[i] = mi;
    v[i] = vi;
    param[i] = updated;
    if (param_bf16 != nullptr) param_bf16[i] = __float2bfloat16_rn(updated);
  }
}

}  // namespace

cudaError_t launch_adamw_update(const AdamWConstants& k, float* param, ConstFloats grad, float* m, float* v, int64_t n,
                                __nv_bfloat16* param_bf16, cudaStream_t stream) {
  return launch_grid_stride(adamw_kernel, n, stream, k, param, grad, m, v, n, param_bf16);
}

}  // namespace cleave::kernels::cuda::detail
