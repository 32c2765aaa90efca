// Checked entry points for the mixture-of-experts routing kernels (moe.hpp); the kernels are in moe.cu.
#include "kernels/cuda/moe.hpp"

#include "engine/cuda/cuda_check.hpp"
#include "kernels/cuda/moe_dot_order.hpp"

namespace cleave::kernels::cuda {

void moe_gather(ConstFloats x, const std::int32_t* index, const float* scale, Floats out, int64_t rows, int64_t d,
                cudaStream_t stream) {
  CLEAVE_ASSERT(rows >= 0 && d >= 0, "cuda moe_gather: negative size {} x {}", rows, d);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_moe_gather(x, index, scale, out, rows, d, stream), "moe_gather_kernel");
}

void moe_combine(ConstFloats src, const std::int32_t* rows, const float* weight, Floats out, int64_t tokens,
                 int64_t k, int64_t d, cudaStream_t stream) {
  CLEAVE_ASSERT(tokens >= 0 && k >= 0 && d >= 0, "cuda moe_combine: negative size {} x {} x {}", tokens, k, d);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_moe_combine(src, rows, weight, out, tokens, k, d, stream),
                           "moe_combine_kernel");
}

void moe_combine_weight_grad(ConstFloats dy, ConstFloats src, const std::int32_t* rows, float* dweight,
                             int64_t tokens, int64_t k, int64_t d, cudaStream_t stream) {
  CLEAVE_ASSERT(tokens >= 0 && k >= 0 && d >= 0, "cuda moe_combine_weight_grad: negative size {} x {} x {}", tokens,
                k, d);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_moe_combine_weight_grad(dy, src, rows, dweight, tokens, k, d, stream),
                           "moe_combine_weight_grad_kernel");
}

}  // namespace cleave::kernels::cuda
