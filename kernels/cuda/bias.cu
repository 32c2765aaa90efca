// Bias kernels (bias.hpp). The backward is two passes: [chunks, cols] partial column sums (a 32 x 8 thread tile
// per 32 columns of one row chunk, rows strided by 8 and the 8 lanes folded in order), then one thread per
// column adding its chunks in order into dbias.
#include "kernels/cuda/bias.hpp"
#include "kernels/cuda/common.cuh"

namespace cleave::kernels::cuda::detail {
namespace {

constexpr int kTileCols = launch::kTileCols;
constexpr int kTileRows = launch::kTileRows;

__global__ void bias_add_forward_kernel(Floats y, ConstFloats bias, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) store(y, i, load(y, i) + load(bias, i % cols));
}

__global__ void bias_partial_kernel(ConstFloats dy, int64_t rows, int64_t cols, int64_t rows_per_chunk,
                                    float* partials) {
  __shared__ float tile[kTileRows][kTileCols];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kTileCols + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float acc = 0.0f;
  if (c < cols) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kTileRows) acc += load(dy, r * cols + c);
  }
  tile[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float sum = tile[0][threadIdx.x];
    for (int k = 1; k < kTileRows; ++k) sum += tile[k][threadIdx.x];
    partials[static_cast<int64_t>(blockIdx.y) * cols + c] = sum;
  }
}

__global__ void bias_final_kernel(const float* partials, int64_t chunks, int64_t cols, float* dbias) {
  for (int64_t c = global_thread(); c < cols; c += grid_threads()) {
    float sum = 0.0f;
    for (int64_t k = 0; k < chunks; ++k) sum += partials[k * cols + c];
    dbias[c] += sum;
  }
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
  const int64_t chunks = column_reduction_chunks(rows);
  const int64_t rows_per_chunk = (rows + chunks - 1) / chunks;
  const LaunchConfig tiles = launch::column_partial(rows, cols);
  bias_partial_kernel<<<to_grid(tiles), to_block(tiles), 0, stream>>>(dy, rows, cols, rows_per_chunk, partials);
  bias_final_kernel<<<grid_for(cols), kThreads, 0, stream>>>(partials, chunks, cols, dbias);
  return cudaGetLastError();
}

}  // namespace cleave::kernels::cuda::detail
