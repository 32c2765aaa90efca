// Checked entry points for the LayerNorm kernels (layernorm.hpp); the kernels are in layernorm.cu.
#include "kernels/cuda/layernorm.hpp"

#include "engine/cuda/cuda_check.hpp"
#include "kernels/cuda/bias.hpp"

namespace cleave::kernels::cuda {

void layernorm_forward(ConstFloats x, ConstFloats gamma, ConstFloats beta, Floats y, float* mean, float* rstd,
                       int64_t rows, int64_t cols, float eps, cudaStream_t stream) {
  CLEAVE_ASSERT(rows >= 0 && cols > 0, "cuda layernorm_forward: bad shape [{}, {}]", rows, cols);
  CLEAVE_ASSERT(eps >= 0.0f, "cuda layernorm_forward: negative eps {}", eps);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_layernorm_forward(x, gamma, beta, y, mean, rstd, rows, cols, eps, stream),
                           "layernorm_forward_kernel");
}

void layernorm_backward_input(ConstFloats dy, ConstFloats x, ConstFloats gamma, const float* mean, const float* rstd,
                              Floats dx, int64_t rows, int64_t cols, cudaStream_t stream) {
  CLEAVE_ASSERT(rows >= 0 && cols > 0, "cuda layernorm_backward_input: bad shape [{}, {}]", rows, cols);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_layernorm_backward_input(dy, x, gamma, mean, rstd, dx, rows, cols, stream),
                           "layernorm_backward_input_kernel");
}

std::size_t layernorm_backward_weight_workspace_size(int64_t rows, int64_t cols) {
  return static_cast<std::size_t>(2 * detail::column_reduction_chunks(rows) * cols) * sizeof(float);
}

void layernorm_backward_weight(ConstFloats dy, ConstFloats x, const float* mean, const float* rstd, float* dgamma,
                               float* dbeta, int64_t rows, int64_t cols, void* workspace, std::size_t workspace_bytes,
                               cudaStream_t stream) {
  CLEAVE_ASSERT(rows >= 0 && cols > 0, "cuda layernorm_backward_weight: bad shape [{}, {}]", rows, cols);
  const std::size_t needed = layernorm_backward_weight_workspace_size(rows, cols);
  CLEAVE_ASSERT(workspace_bytes >= needed && (needed == 0 || workspace != nullptr),
                "cuda layernorm_backward_weight: workspace of {} bytes, {} needed for [{}, {}]", workspace_bytes,
                needed, rows, cols);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_layernorm_backward_weight(dy, x, mean, rstd, dgamma, dbeta, rows, cols,
                                                                    static_cast<float*>(workspace), stream),
                           "layernorm_weight_partial_kernel/layernorm_weight_final_kernel");
}

}  // namespace cleave::kernels::cuda
