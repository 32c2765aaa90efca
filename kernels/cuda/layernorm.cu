// LayerNorm kernels (layernorm.hpp). Forward and backward_input: one warp per row, lanes stride the columns
// (coalesced), butterfly sums give every lane the row statistics. backward_weight: column_sum.cuh's two passes
// (bias_backward's scheme) with two sums per column, dgamma's and dbeta's.
#include "kernels/cuda/column_sum.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/layernorm.hpp"

namespace cleave::kernels::cuda::detail {
namespace {

constexpr int kRowsPerBlock = launch::kRowsPerBlock;

unsigned int row_blocks(int64_t rows) { return static_cast<unsigned int>(launch::warp_per_row(rows).grid.x); }

__global__ void layernorm_forward_kernel(ConstFloats x, ConstFloats gamma, ConstFloats beta, Floats y, float* mean,
                                         float* rstd, int64_t rows, int64_t cols, float eps) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  for (int64_t r = first; r < rows; r += static_cast<int64_t>(gridDim.x) * kRowsPerBlock) {
    const ConstFloats xr = offset_by(x, r * cols);
    float sum = 0.0f;
    for (int64_t c = lane; c < cols; c += kWarp) sum += load(xr, c);
    const float mu = warp_sum(sum) / static_cast<float>(cols);
    float sq = 0.0f;
    for (int64_t c = lane; c < cols; c += kWarp) {
      const float d = load(xr, c) - mu;
      sq += d * d;
    }
    const float rs = 1.0f / sqrtf(warp_sum(sq) / static_cast<float>(cols) + eps);
    const Floats yr = offset_by(y, r * cols);
    for (int64_t c = lane; c < cols; c += kWarp) store(yr, c, (load(xr, c) - mu) * rs * load(gamma, c) + load(beta, c));
    if (lane == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * gamma.
__global__ void layernorm_backward_input_kernel(ConstFloats dy, ConstFloats x, ConstFloats gamma, const float* mean,
                                                const float* rstd, Floats dx, int64_t rows, int64_t cols) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  for (int64_t r = first; r < rows; r += static_cast<int64_t>(gridDim.x) * kRowsPerBlock) {
    const ConstFloats dyr = offset_by(dy, r * cols);
    const ConstFloats xr = offset_by(x, r * cols);
    const float mu = mean[r];
    const float rs = rstd[r];
    float sum_g = 0.0f;
    float sum_gx = 0.0f;
    for (int64_t c = lane; c < cols; c += kWarp) {
      const float g = load(dyr, c) * load(gamma, c);
      sum_g += g;
      sum_gx += g * (load(xr, c) - mu) * rs;
    }
    const float mean_g = warp_sum(sum_g) / static_cast<float>(cols);
    const float mean_gx = warp_sum(sum_gx) / static_cast<float>(cols);
    const Floats dxr = offset_by(dx, r * cols);
    for (int64_t c = lane; c < cols; c += kWarp) {
      const float xhat = (load(xr, c) - mu) * rs;
      store(dxr, c, rs * (load(dyr, c) * load(gamma, c) - mean_g - xhat * mean_gx));
    }
  }
}

// Sum 0 is dgamma's, sum 1 dbeta's: partials holds their [chunks, cols] partials one after the other.
__global__ void layernorm_weight_partial_kernel(ConstFloats dy, ConstFloats x, const float* mean, const float* rstd,
                                                int64_t rows, int64_t cols, int64_t rows_per_chunk, float* partials) {
  column_partial_sums<2>(rows, cols, rows_per_chunk, partials, [&](int64_t r, int64_t c, float (&acc)[2]) {
    const float d = load(dy, r * cols + c);
    acc[0] += d * (load(x, r * cols + c) - mean[r]) * rstd[r];
    acc[1] += d;
  });
}

__global__ void layernorm_weight_final_kernel(const float* partials, int64_t chunks, int64_t cols, float* dgamma,
                                              float* dbeta) {
  for (int64_t c = global_thread(); c < cols; c += grid_threads()) {
    dgamma[c] += column_chunk_sum(partials, chunks, cols, c);
    dbeta[c] += column_chunk_sum(partials + chunks * cols, chunks, cols, c);
  }
}

}  // namespace

cudaError_t launch_layernorm_forward(ConstFloats x, ConstFloats gamma, ConstFloats beta, Floats y, float* mean,
                                     float* rstd, int64_t rows, int64_t cols, float eps, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  layernorm_forward_kernel<<<row_blocks(rows), kThreads, 0, stream>>>(x, gamma, beta, y, mean, rstd, rows, cols, eps);
  return cudaGetLastError();
}

cudaError_t launch_layernorm_backward_input(ConstFloats dy, ConstFloats x, ConstFloats gamma, const float* mean,
                                            const float* rstd, Floats dx, int64_t rows, int64_t cols,
                                            cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  layernorm_backward_input_kernel<<<row_blocks(rows), kThreads, 0, stream>>>(dy, x, gamma, mean, rstd, dx, rows, cols);
  return cudaGetLastError();
}

cudaError_t launch_layernorm_backward_weight(ConstFloats dy, ConstFloats x, const float* mean, const float* rstd,
                                             float* dgamma, float* dbeta, int64_t rows, int64_t cols, float* partials,
                                             cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;  // an empty grid is not a legal launch
  const LaunchConfig tiles = launch::column_partial(rows, cols);
  layernorm_weight_partial_kernel<<<to_grid(tiles), to_block(tiles), 0, stream>>>(
      dy, x, mean, rstd, rows, cols, column_rows_per_chunk(rows), partials);
  layernorm_weight_final_kernel<<<grid_for(cols), kThreads, 0, stream>>>(
      partials, launch::column_reduction_chunks(rows), cols, dgamma, dbeta);
  return cudaGetLastError();
}

}  // namespace cleave::kernels::cuda::detail
