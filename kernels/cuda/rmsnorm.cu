// RMSNorm kernels (rmsnorm.hpp). Forward and backward_input: one warp per row, lanes stride the columns
// (coalesced), a butterfly sum gives every lane the row's sum (the LayerNorm kernels' scheme, layernorm.cu).
// backward_weight: column_sum.cuh's two passes over dy x rstd (bias_backward's scheme): [chunks, cols] partial
// column sums, then one thread per column adding its chunks in order.
#include "kernels/cuda/column_sum.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rmsnorm.hpp"

namespace cleave::kernels::cuda::detail {
namespace {

constexpr int kRowsPerBlock = launch::kRowsPerBlock;

unsigned int row_blocks(int64_t rows) { return static_cast<unsigned int>(launch::warp_per_row(rows).grid.x); }

// ---- One row's arithmetic, shared by the unfused and the fused kernels ------------------------------------------
// A fused kernel's statistics are the unfused kernel's by construction: the same terms summed in the same order
// (each lane its columns c = lane, lane + 32, ..., then warp_sum's butterfly) through the same expressions, so
// nvcc contracts them into the same FMAs. The callers' row loops are warp-uniform (r depends on the warp only), so
// every lane reaches the shuffles of warp_sum.

// Σ term(c) over the row's cols columns, on every lane of the warp.
template <typename Term>
__device__ __forceinline__ float row_sum(int64_t cols, int lane, Term term) {
  float acc = 0.0f;
  for (int64_t c = lane; c < cols; c += kWarp) acc += term(c);
  return warp_sum(acc);
}

// rstd = 1 / sqrt(mean(x²) + eps), from the row's Σ x².
__device__ __forceinline__ float rms_rstd(float sum_sq, int64_t cols, float eps) {
  return 1.0f / sqrtf(sum_sq / static_cast<float>(cols) + eps);
}
// The normalised, weighted value of x.
__device__ __forceinline__ float rms_y(float x, float rs, float w) { return x * rs * w; }

// y = x r w with r = (mean(x^2) + eps)^(-1/2), dr/dx_j = -r^3 x_j / cols, so
// dx_j = r (g_j - x_j k) with g = dy w and k = r^2 mean(g x): k from the row's Σ dy w x, then dx_j.
__device__ __forceinline__ float rms_grad_dot(ConstFloats dyr, ConstFloats weight, ConstFloats xr, int64_t c) {
  return load(dyr, c) * load(weight, c) * load(xr, c);
}
__device__ __forceinline__ float rms_k(float rs, float sum_gx, int64_t cols) {
  return rs * rs * sum_gx / static_cast<float>(cols);
}
__device__ __forceinline__ float rms_dx(ConstFloats dyr, ConstFloats weight, ConstFloats xr, float rs, float k,
                                        int64_t c) {
  return rs * (load(dyr, c) * load(weight, c) - load(xr, c) * k);
}

__global__ void rmsnorm_forward_kernel(ConstFloats x, ConstFloats weight, Floats y, float* rstd, int64_t rows,
                                       int64_t cols, float eps) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  for (int64_t r = first; r < rows; r += static_cast<int64_t>(gridDim.x) * kRowsPerBlock) {
    const ConstFloats xr = offset_by(x, r * cols);
    const float rs = rms_rstd(row_sum(cols, lane,
                                      [&](int64_t c) {
                                        const float v = load(xr, c);
                                        return v * v;
                                      }),
                              cols, eps);
    const Floats yr = offset_by(y, r * cols);
    for (int64_t c = lane; c < cols; c += kWarp) store(yr, c, rms_y(load(xr, c), rs, load(weight, c)));
    if (lane == 0) rstd[r] = rs;
  }
}

__global__ void rmsnorm_backward_input_kernel(ConstFloats dy, ConstFloats x, ConstFloats weight, const float* rstd,
                                              Floats dx, int64_t rows, int64_t cols) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  for (int64_t r = first; r < rows; r += static_cast<int64_t>(gridDim.x) * kRowsPerBlock) {
    const ConstFloats dyr = offset_by(dy, r * cols);
    const ConstFloats xr = offset_by(x, r * cols);
    const float rs = rstd[r];
    const float k = rms_k(rs, row_sum(cols, lane, [&](int64_t c) { return rms_grad_dot(dyr, weight, xr, c); }), cols);
    const Floats dxr = offset_by(dx, r * cols);
    // Each lane reads its dy elements before it overwrites them, so dx may alias dy.
    for (int64_t c = lane; c < cols; c += kWarp) store(dxr, c, rms_dx(dyr, weight, xr, rs, k, c));
  }
}

// The pair add + rmsnorm_forward_kernel in one pass: each lane stores its r elements and reads them back (its own
// writes: the stored, possibly bf16-rounded, value), so the sum and y are those of the unfused kernels.
__global__ void add_rmsnorm_forward_kernel(ConstFloats x, ConstFloats y, ConstFloats weight, Floats r, Floats out,
                                           float* rstd, int64_t rows, int64_t cols, float eps) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  for (int64_t row = first; row < rows; row += static_cast<int64_t>(gridDim.x) * kRowsPerBlock) {
    const ConstFloats xr = offset_by(x, row * cols);
    const ConstFloats yr = offset_by(y, row * cols);
    const Floats rr = offset_by(r, row * cols);
    const float rs = rms_rstd(row_sum(cols, lane,
                                      [&](int64_t c) {
                                        store(rr, c, load(xr, c) + load(yr, c));
                                        const float v = load(ConstFloats(rr), c);
                                        return v * v;
                                      }),
                              cols, eps);
    const Floats outr = offset_by(out, row * cols);
    for (int64_t c = lane; c < cols; c += kWarp) {
      store(outr, c, rms_y(load(ConstFloats(rr), c), rs, load(weight, c)));
    }
    if (lane == 0) rstd[row] = rs;
  }
}

// v as a store into t leaves it (rounded to nearest even when t is bf16).
__device__ __forceinline__ float as_stored(Floats t, float v) {
  return t.bf16() ? __bfloat162float(__float2bfloat16_rn(v)) : v;
}

// rmsnorm_backward_input_kernel's value as dx's type would store it, plus dres: the pair rmsnorm_backward_input +
// add_inplace. Each lane reads its dres elements before it overwrites them.
__global__ void add_rmsnorm_backward_input_kernel(ConstFloats dy, ConstFloats dres, ConstFloats x, ConstFloats weight,
                                                  const float* rstd, Floats dx, int64_t rows, int64_t cols) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  for (int64_t r = first; r < rows; r += static_cast<int64_t>(gridDim.x) * kRowsPerBlock) {
    const ConstFloats dyr = offset_by(dy, r * cols);
    const ConstFloats xr = offset_by(x, r * cols);
    const float rs = rstd[r];
    const float k = rms_k(rs, row_sum(cols, lane, [&](int64_t c) { return rms_grad_dot(dyr, weight, xr, c); }), cols);
    const ConstFloats dresr = offset_by(dres, r * cols);
    const Floats dxr = offset_by(dx, r * cols);
    for (int64_t c = lane; c < cols; c += kWarp) {
      // __fadd_rn: never contracted with rms_dx's product into an FMA the unfused pair would not have.
      store(dxr, c, __fadd_rn(as_stored(dx, rms_dx(dyr, weight, xr, rs, k, c)), load(dresr, c)));
    }
  }
}

__global__ void rmsnorm_weight_partial_kernel(ConstFloats dy, ConstFloats x, const float* rstd, int64_t rows,
                                              int64_t cols, int64_t rows_per_chunk, float* partials) {
  column_partial_sums<1>(rows, cols, rows_per_chunk, partials, [&](int64_t r, int64_t c, float (&acc)[1]) {
    acc[0] += load(dy, r * cols + c) * load(x, r * cols + c) * rstd[r];
  });
}

__global__ void rmsnorm_weight_final_kernel(const float* partials, int64_t chunks, int64_t cols, float* dweight) {
  add_column_sums(partials, chunks, cols, dweight);
}

}  // namespace

cudaError_t launch_rmsnorm_forward(ConstFloats x, ConstFloats weight, Floats y, float* rstd, int64_t rows,
                                   int64_t cols, float eps, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  rmsnorm_forward_kernel<<<row_blocks(rows), kThreads, 0, stream>>>(x, weight, y, rstd, rows, cols, eps);
  return cudaGetLastError();
}

cudaError_t launch_rmsnorm_backward_input(ConstFloats dy, ConstFloats x, ConstFloats weight, const float* rstd,
                                          Floats dx, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  rmsnorm_backward_input_kernel<<<row_blocks(rows), kThreads, 0, stream>>>(dy, x, weight, rstd, dx, rows, cols);
  return cudaGetLastError();
}

cudaError_t launch_add_rmsnorm_forward(ConstFloats x, ConstFloats y, ConstFloats weight, Floats r, Floats out,
                                       float* rstd, int64_t rows, int64_t cols, float eps, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  add_rmsnorm_forward_kernel<<<row_blocks(rows), kThreads, 0, stream>>>(x, y, weight, r, out, rstd, rows, cols, eps);
  return cudaGetLastError();
}

cudaError_t launch_add_rmsnorm_backward_input(ConstFloats dy, ConstFloats dres, ConstFloats x, ConstFloats weight,
                                              const float* rstd, Floats dx, int64_t rows, int64_t cols,
                                              cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  add_rmsnorm_backward_input_kernel<<<row_blocks(rows), kThreads, 0, stream>>>(dy, dres, x, weight, rstd, dx, rows,
                                                                               cols);
  return cudaGetLastError();
}

cudaError_t launch_rmsnorm_backward_weight(ConstFloats dy, ConstFloats x, const float* rstd, float* dweight,
                                           int64_t rows, int64_t cols, float* partials, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;  // an empty grid is not a legal launch
  const LaunchConfig tiles = launch::column_partial(rows, cols);
  rmsnorm_weight_partial_kernel<<<to_grid(tiles), to_block(tiles), 0, stream>>>(dy, x, rstd, rows, cols,
                                                                                column_rows_per_chunk(rows), partials);
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) return status;
  rmsnorm_weight_final_kernel<<<grid_for(cols), kThreads, 0, stream>>>(
      partials, launch::column_reduction_chunks(rows), cols, dweight);
  return cudaGetLastError();
}

}  // namespace cleave::kernels::cuda::detail
