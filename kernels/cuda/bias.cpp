// Checked entry points for the bias kernels (bias.hpp); the kernels are in bias.cu.
#include "kernels/cuda/bias.hpp"

#include "engine/cuda/cuda_check.hpp"

namespace cleave::kernels::cuda {

void bias_add_forward(Floats y, ConstFloats bias, int64_t rows, int64_t cols, cudaStream_t stream) {
  CLEAVE_ASSERT(rows >= 0 && cols >= 0, "cuda bias_add_forward: negative shape [{}, {}]", rows, cols);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_bias_add_forward(y, bias, rows, cols, stream), "bias_add_forward_kernel");
}

std::size_t bias_backward_workspace_size(int64_t rows, int64_t cols) {
  return static_cast<std::size_t>(detail::column_reduction_chunks(rows) * cols) * sizeof(float);
}

void bias_backward(ConstFloats dy, float* dbias, int64_t rows, int64_t cols, void* workspace,
                   std::size_t workspace_bytes, cudaStream_t stream) {
  CLEAVE_ASSERT(rows >= 0 && cols >= 0, "cuda bias_backward: negative shape [{}, {}]", rows, cols);
  const std::size_t needed = bias_backward_workspace_size(rows, cols);
  CLEAVE_ASSERT(workspace_bytes >= needed && (needed == 0 || workspace != nullptr),
                "cuda bias_backward: workspace of {} bytes, {} needed for [{}, {}]", workspace_bytes, needed, rows,
                cols);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_bias_backward(dy, dbias, rows, cols, static_cast<float*>(workspace), stream),
                           "bias_partial_kernel/bias_final_kernel");
}

}  // namespace cleave::kernels::cuda
