// Checked entry point of sum_squares_exact (sum_squares_exact.hpp).
#include "kernels/cuda/sum_squares_exact.hpp"

#include "engine/core/error.hpp"
#include "engine/cuda/cuda_check.hpp"

namespace cleave::kernels::cuda {

void sum_squares_exact(const float* x, int64_t n, ExactSquareSum* acc, cudaStream_t stream) {
  CLEAVE_ASSERT(n >= 0, "cuda sum_squares_exact: negative size {}", n);
  CLEAVE_ASSERT(acc != nullptr, "cuda sum_squares_exact: no accumulator");
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_sum_squares_exact(x, n, acc, stream), "sum_squares_exact_kernel");
}

}  // namespace cleave::kernels::cuda
