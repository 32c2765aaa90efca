// Internal to kernels/cuda/*.cu: launch geometry and deterministic warp/block reductions.
//
// Invariant: every reduction here combines values in an order fixed by the launch shape alone (butterfly
// shuffles, fixed shared-memory trees), never by timing, so a kernel built on them gives the same bits on
// every run with the same shapes. Device code only; no engine headers (nvcc does not compile fmt).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/floats.hpp"
#include "kernels/cuda/launch_config.hpp"

namespace cleave::kernels::cuda::detail {

constexpr int kThreads = launch::kThreads;
constexpr int kWarp = launch::kWarp;

// A config's grid and block as CUDA takes them (launch_config.hpp keeps every dimension in range).
inline dim3 to_grid(const LaunchConfig& c) {
  return dim3(static_cast<unsigned int>(c.grid.x), static_cast<unsigned int>(c.grid.y),
              static_cast<unsigned int>(c.grid.z));
}
inline dim3 to_block(const LaunchConfig& c) {
  return dim3(static_cast<unsigned int>(c.block.x), static_cast<unsigned int>(c.block.y),
              static_cast<unsigned int>(c.block.z));
}

// Blocks for a grid-stride loop over n items (launch::grid_stride): enough to fill any current GPU, capped so
// the grid stays legal.
inline unsigned int grid_for(int64_t n, int threads = kThreads) {
  return static_cast<unsigned int>(launch::grid_stride(n, threads).grid.x);
}

// Launches `kernel` as a grid-stride loop over n items on `stream` (grid_for(n) blocks of kThreads threads, no
// dynamic shared memory; no launch for n = 0) and returns the launch's error.
template <typename... Params, typename... Args>
cudaError_t launch_grid_stride(void (*kernel)(Params...), int64_t n, cudaStream_t stream, Args... args) {
  if (n == 0) return cudaSuccess;
  kernel<<<grid_for(n), kThreads, 0, stream>>>(args...);
  return cudaGetLastError();
}

__device__ __forceinline__ int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_threads() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// Element i of a Floats view as f32 (exact widening), and f32 -> element i (bf16: round to nearest even).
__device__ __forceinline__ float load(ConstFloats x, int64_t i) {
  return x.bf16() ? __bfloat162float(static_cast<const __nv_bfloat16*>(x.data)[i])
                  : static_cast<const float*>(x.data)[i];
}
__device__ __forceinline__ void store(Floats y, int64_t i, float v) {
  if (y.bf16()) {
    static_cast<__nv_bfloat16*>(y.data)[i] = __float2bfloat16_rn(v);
  } else {
    static_cast<float*>(y.data)[i] = v;
  }
}
// A view advanced by `offset` elements.
__device__ __forceinline__ ConstFloats offset_by(ConstFloats x, int64_t offset) {
  return ConstFloats(static_cast<const char*>(x.data) + offset * (x.bf16() ? 2 : 4), x.type);
}
__device__ __forceinline__ Floats offset_by(Floats y, int64_t offset) {
  return Floats(static_cast<char*>(y.data) + offset * (y.bf16() ? 2 : 4), y.type);
}

// Every lane gets the same sum / max (butterfly: the same pairing on every lane).
__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum over a block of kThreads threads through `scratch` (kThreads entries); the result is returned to every
// thread. Callers reuse scratch only after the call returns (it ends with a barrier).
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
  scratch[threadIdx.x] = v;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride) scratch[threadIdx.x] += scratch[threadIdx.x + stride];
    __syncthreads();
  }
  const T total = scratch[0];
  __syncthreads();
  return total;
}

}  // namespace cleave::kernels::cuda::detail
