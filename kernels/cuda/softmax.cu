// Softmax kernels (softmax.hpp): one warp per row, lanes stride the columns (coalesced), butterfly reductions
// give every lane the row statistics. The causal variant is the same kernel with the live length r % T + 1 and
// zeros written past it, so attention's mask, scale and softmax are one pass over the scores.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/softmax.hpp"

namespace cleave::kernels::cuda::detail {
namespace {

constexpr int kRowsPerBlock = launch::kRowsPerBlock;

unsigned int row_blocks(int64_t rows) { return static_cast<unsigned int>(launch::warp_per_row(rows).grid.x); }

__global__ void softmax_forward_kernel(ConstFloats x, Floats y, int64_t rows, int64_t cols, bool causal, float scale) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  for (int64_t r = first; r < rows; r += static_cast<int64_t>(gridDim.x) * kRowsPerBlock) {
    const ConstFloats xr = offset_by(x, r * cols);
    const Floats yr = offset_by(y, r * cols);
    const int64_t live = causal ? r % cols + 1 : cols;
    float mx = -INFINITY;
    for (int64_t c = lane; c < live; c += kWarp) mx = fmaxf(mx, scale * load(xr, c));
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int64_t c = lane; c < live; c += kWarp) sum += expf(scale * load(xr, c) - mx);
    const float inv = 1.0f / warp_sum(sum);
    for (int64_t c = lane; c < cols; c += kWarp) store(yr, c, c < live ? expf(scale * load(xr, c) - mx) * inv : 0.0f);
  }
}

__global__ void softmax_backward_kernel(ConstFloats y, ConstFloats dy, Floats dx, int64_t rows, int64_t cols,
                                        bool causal, float scale) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  for (int64_t r = first; r < rows; r += static_cast<int64_t>(gridDim.x) * kRowsPerBlock) {
    const ConstFloats yr = offset_by(y, r * cols);
    const ConstFloats dyr = offset_by(dy, r * cols);
    const Floats dxr = offset_by(dx, r * cols);
    const int64_t live = causal ? r % cols + 1 : cols;
    float dot = 0.0f;
    for (int64_t c = lane; c < live; c += kWarp) dot += load(yr, c) * load(dyr, c);
    dot = warp_sum(dot);
    for (int64_t c = lane; c < cols; c += kWarp) {
      store(dxr, c, c < live ? load(yr, c) * (load(dyr, c) - dot) * scale : 0.0f);
    }
  }
}

}  // namespace

cudaError_t launch_softmax_forward(ConstFloats x, Floats y, int64_t rows, int64_t cols, bool causal, float scale,
                                   cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  softmax_forward_kernel<<<row_blocks(rows), kThreads, 0, stream>>>(x, y, rows, cols, causal, scale);
  return cudaGetLastError();
}

cudaError_t launch_softmax_backward(ConstFloats y, ConstFloats dy, Floats dx, int64_t rows, int64_t cols, bool causal,
                                    float scale, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  softmax_backward_kernel<<<row_blocks(rows), kThreads, 0, stream>>>(y, dy, dx, rows, cols, causal, scale);
  return cudaGetLastError();
}

}  // namespace cleave::kernels::cuda::detail
