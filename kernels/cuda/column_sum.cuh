// Internal to kernels/cuda/*.cu: column sums over rows in two passes, the scheme of the bias, layernorm and rmsnorm
// weight gradients. First pass (a kernel launched with launch::column_partial(rows, cols)): block (x, y) sums
// columns [32 x, 32 x + 32) of row chunk y with a 32 x 8 thread tile, each thread its column's rows r0 + ty,
// r0 + ty + 8, ... in order, then the 8 lanes folded in order into partials [chunks, cols]. Second pass: one
// thread per column adds its chunks' partials in chunk order.
//
// Invariant: the order of every sum is fixed by (rows, cols) alone, so a gradient's bits do not depend on timing;
// a kernel with several sums (layernorm's gamma and beta) adds each in exactly the order of a one-sum kernel.
#pragma once

#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace cleave::kernels::cuda::detail {

// The rows of one chunk of launch::column_partial's grid (the last chunk may have fewer).
inline int64_t column_rows_per_chunk(int64_t rows) {
  const int64_t chunks = launch::column_reduction_chunks(rows);
  return (rows + chunks - 1) / chunks;
}

// The first pass's body. add(r, c, acc) adds row r's terms of column c into acc[0 .. kSums). Sum s of chunk y
// lands at partials[(s * chunks + y) * cols + c], chunks = gridDim.y: the kSums partials lie one after another.
template <int kSums, typename Add>
__device__ __forceinline__ void column_partial_sums(int64_t rows, int64_t cols, int64_t rows_per_chunk,
                                                    float* partials, Add add) {
  constexpr int kTileCols = launch::kTileCols;
  constexpr int kTileRows = launch::kTileRows;
  __shared__ float tile[kSums][kTileRows][kTileCols];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kTileCols + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float acc[kSums] = {};
  if (c < cols) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kTileRows) add(r, c, acc);
  }
  for (int s = 0; s < kSums; ++s) tile[s][threadIdx.y][threadIdx.x] = acc[s];
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    for (int s = 0; s < kSums; ++s) {
      float sum = tile[s][0][threadIdx.x];
      for (int k = 1; k < kTileRows; ++k) sum += tile[s][k][threadIdx.x];
      partials[(static_cast<int64_t>(s) * gridDim.y + blockIdx.y) * cols + c] = sum;
    }
  }
}

// The second pass for column c: its chunks' partials [chunks, cols] added in chunk order.
__device__ __forceinline__ float column_chunk_sum(const float* partials, int64_t chunks, int64_t cols, int64_t c) {
  float sum = 0.0f;
  for (int64_t k = 0; k < chunks; ++k) sum += partials[k * cols + c];
  return sum;
}

// The second pass's body for one sum, a grid-stride loop over the columns: out[c] += column_chunk_sum(c).
__device__ __forceinline__ void add_column_sums(const float* partials, int64_t chunks, int64_t cols, float* out) {
  for (int64_t c = global_thread(); c < cols; c += grid_threads()) out[c] += column_chunk_sum(partials, chunks, cols, c);
}

}  // namespace cleave::kernels::cuda::detail
