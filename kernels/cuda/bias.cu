// Bias kernels (bias.hpp). The backward is column_sum.cuh's two passes over dy: [chunks, cols] partial column
// sums, then one thread per column adding its chunks in order into dbias.
#include "kernels/cuda/bias.hpp"
#include "kernels/cuda/column_sum.cuh"
#include "kernels/cuda/common.cuh"

namespace cleave::kernels::cuda::detail {
namespace {

__global__ void bias_add_forward_kernel(Floats y, ConstFloats bias, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) store(y, i, load(y, i) + load(bias, i % cols));
}

__global__ void bias_partial_kernel(ConstFloats dy, int64_t rows, int64_t cols, int64_t rows_per_chunk,
                                    float* partials) {
  column_partial_sums<1>(rows, cols, rows_per_chunk, partials,
                         [&](int64_t r, int64_t c, float (&acc)[1]) { acc[0] += load(dy, r * cols + c); });
}

__global__ void bias_final_kernel(const float* partials, int64_t chunks, int64_t cols, float* dbias) {
  add_column_sums(partials, chunks, cols, dbias);
}

}  // namespace

int64_t column_reduction_chunks(int64_t rows) { return launch::column_reduction_chunks(rows); }

cudaError_t launch_bias_add_forward(Floats y, ConstFloats bias, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows * cols == 0) return cudaSuccess;
  bias_add_forward_kernel<<<grid_for(rows * cols), kThreads, 0, stream>>>(y, bias, rows, cols);
  return cudaGetLastError();
}

cudaError_t launch_bias_backward(ConstFloats dy, float* dbias, int64_t rows, int64_t cols, float* partials,
                                 cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  const LaunchConfig tiles = launch::column_partial(rows, cols);
  bias_partial_kernel<<<to_grid(tiles), to_block(tiles), 0, stream>>>(dy, rows, cols, column_rows_per_chunk(rows),
                                                                     partials);
  bias_final_kernel<<<grid_for(cols), kThreads, 0, stream>>>(partials, column_reduction_chunks(rows), cols, dbias);
  return cudaGetLastError();
}

}  // namespace cleave::kernels::cuda::detail
