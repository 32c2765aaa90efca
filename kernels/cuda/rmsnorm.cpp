// Checked entry points for the RMSNorm kernels (rmsnorm.hpp); the kernels are in rmsnorm.cu.
#include "kernels/cuda/rmsnorm.hpp"

#include "engine/cuda/cuda_check.hpp"
#include "kernels/cuda/bias.hpp"

namespace cleave::kernels::cuda {

void rmsnorm_forward(ConstFloats x, ConstFloats weight, Floats y, float* rstd, int64_t rows, int64_t cols, float eps,
                     cudaStream_t stream) {
  CLEAVE_ASSERT(rows >= 0 && cols > 0, "cuda rmsnorm_forward: bad shape [{}, {}]", rows, cols);
  CLEAVE_ASSERT(eps > 0.0f, "cuda rmsnorm_forward: eps {} is not > 0", eps);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_rmsnorm_forward(x, weight, y, rstd, rows, cols, eps, stream),
                           "rmsnorm_forward_kernel");
}

void rmsnorm_backward_input(ConstFloats dy, ConstFloats x, ConstFloats weight, const float* rstd, Floats dx,
                            int64_t rows, int64_t cols, cudaStream_t stream) {
  CLEAVE_ASSERT(rows >= 0 && cols > 0, "cuda rmsnorm_backward_input: bad shape [{}, {}]", rows, cols);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_rmsnorm_backward_input(dy, x, weight, rstd, dx, rows, cols, stream),
                           "rmsnorm_backward_input_kernel");
}

void add_rmsnorm_forward(ConstFloats x, ConstFloats y, ConstFloats weight, Floats r, Floats out, float* rstd,
                         int64_t rows, int64_t cols, float eps, cudaStream_t stream) {
  CLEAVE_ASSERT(rows >= 0 && cols > 0, "cuda add_rmsnorm_forward: bad shape [{}, {}]", rows, cols);
  CLEAVE_ASSERT(eps > 0.0f, "cuda add_rmsnorm_forward: eps {} is not > 0", eps);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_add_rmsnorm_forward(x, y, weight, r, out, rstd, rows, cols, eps, stream),
                           "add_rmsnorm_forward_kernel");
}

void add_rmsnorm_backward_input(ConstFloats dy, ConstFloats dres, ConstFloats x, ConstFloats weight,
                                const float* rstd, Floats dx, int64_t rows, int64_t cols, cudaStream_t stream) {
  CLEAVE_ASSERT(rows >= 0 && cols > 0, "cuda add_rmsnorm_backward_input: bad shape [{}, {}]", rows, cols);
  CLEAVE_CUDA_CHECK_LAUNCH(
      detail::launch_add_rmsnorm_backward_input(dy, dres, x, weight, rstd, dx, rows, cols, stream),
      "add_rmsnorm_backward_input_kernel");
}

std::size_t rmsnorm_backward_weight_workspace_size(int64_t rows, int64_t cols) {
  return static_cast<std::size_t>(detail::column_reduction_chunks(rows) * cols) * sizeof(float);
}

void rmsnorm_backward_weight(ConstFloats dy, ConstFloats x, const float* rstd, float* dweight, int64_t rows,
                             int64_t cols, void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  CLEAVE_ASSERT(rows >= 0 && cols > 0, "cuda rmsnorm_backward_weight: bad shape [{}, {}]", rows, cols);
  const std::size_t needed = rmsnorm_backward_weight_workspace_size(rows, cols);
  CLEAVE_ASSERT(workspace_bytes >= needed && (needed == 0 || workspace != nullptr),
                "cuda rmsnorm_backward_weight: workspace of {} bytes, {} needed for [{}, {}]", workspace_bytes, needed,
                rows, cols);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_rmsnorm_backward_weight(dy, x, rstd, dweight, rows, cols,
                                                                  static_cast<float*>(workspace), stream),
                           "rmsnorm_weight_partial_kernel/rmsnorm_weight_final_kernel");
}

}  // namespace cleave::kernels::cuda
