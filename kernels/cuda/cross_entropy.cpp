// Checked entry points for the fused cross-entropy kernels (cross_entropy.hpp); kernels in cross_entropy.cu.
#include "kernels/cuda/cross_entropy.hpp"

#include <limits>

#include "engine/cuda/cuda_check.hpp"
#include "kernels/cuda/index_status.hpp"

namespace cleave::kernels::cuda {

std::size_t softmax_cross_entropy_forward_workspace_size(int64_t rows) {
  return static_cast<std::size_t>(rows) * sizeof(double);
}

void softmax_cross_entropy_forward(const float* logits, const int32_t* targets, float* lse, double* loss_sum,
                                   uint32_t* bad_row, int64_t rows, int64_t classes, void* workspace,
                                   std::size_t workspace_bytes, cudaStream_t stream) {
  CLEAVE_ASSERT(rows >= 0 && classes > 0, "cuda softmax_cross_entropy_forward: bad shape [{}, {}]", rows, classes);
  CLEAVE_ASSERT(rows < std::numeric_limits<uint32_t>::max() && classes <= std::numeric_limits<int32_t>::max(),
                "cuda softmax_cross_entropy_forward: shape [{}, {}] exceeds 32-bit rows or classes", rows, classes);
  const std::size_t needed = softmax_cross_entropy_forward_workspace_size(rows);
  CLEAVE_ASSERT(workspace_bytes >= needed && (needed == 0 || workspace != nullptr),
                "cuda softmax_cross_entropy_forward: workspace of {} bytes, {} needed for {} rows", workspace_bytes,
                needed, rows);
  CLEAVE_CUDA_CHECK_LAUNCH(
      detail::launch_softmax_cross_entropy_forward(logits, targets, lse, loss_sum, bad_row, rows, classes,
                                                   static_cast<double*>(workspace), stream),
      "cross_entropy_forward_kernel/sum_rows_kernel");
}

void softmax_cross_entropy_backward(const float* logits, const int32_t* targets, const float* lse, float scale,
                                    float* dlogits, uint32_t* bad_row, int64_t rows, int64_t classes,
                                    cudaStream_t stream) {
  CLEAVE_ASSERT(rows >= 0 && classes > 0, "cuda softmax_cross_entropy_backward: bad shape [{}, {}]", rows, classes);
  CLEAVE_ASSERT(rows < std::numeric_limits<uint32_t>::max() && classes <= std::numeric_limits<int32_t>::max(),
                "cuda softmax_cross_entropy_backward: shape [{}, {}] exceeds 32-bit rows or classes", rows, classes);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_softmax_cross_entropy_backward(logits, targets, lse, scale, dlogits, bad_row,
                                                                         rows, classes, stream),
                           "cross_entropy_backward_kernel");
}

void check_targets_status(const uint32_t* bad_row, const int32_t* targets, int64_t classes, const char* op,
                          cudaStream_t stream) {
  const std::optional<int64_t> row = read_index_status(bad_row, stream);
  if (!row) return;
  const int32_t target = read_device_int32(targets + *row, stream);
  CLEAVE_THROW("{}: target {} at row {} is out of range [0, {}) (number of classes {}; -1 marks an ignored row)", op,
               target, *row, classes, classes);
}

}  // namespace cleave::kernels::cuda
