// Rank-ordered reduction kernel for the NCCL backend's deterministic mode (ordered_reduce.hpp).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "engine/comm/nccl/ordered_reduce.hpp"

namespace cleave::comm {
namespace {

__device__ __forceinline__ float load(const float* p, std::int64_t i) { return p[i]; }
__device__ __forceinline__ float load(const __nv_bfloat16* p, std::int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ float load(const __half* p, std::int64_t i) { return __half2float(p[i]); }
__device__ __forceinline__ void store(float* p, std::int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, std::int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store(__half* p, std::int64_t i, float v) { p[i] = __float2half_rn(v); }

// Same rule as the host: NaN propagates, the earliest of equal values is kept.
__device__ __forceinline__ float combine_max(float acc, float v) {
  if (isnan(acc)) return acc;
  return (v > acc || isnan(v)) ? v : acc;
}

template <typename T>
__global__ void ordered_reduce_kernel(const T* staged, int slots, std::int64_t stride, T* out, std::int64_t count,
                                      bool is_max) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += step) {
    float acc = load(staged, i);
    for (int q = 1; q < slots; ++q) {
      const float v = load(staged + q * stride, i);
      acc = is_max ? combine_max(acc, v) : __fadd_rn(acc, v);
    }
    store(out, i, acc);
  }
}

template <typename T>
cudaError_t launch(const void* staged, int slots, std::int64_t stride, void* out, std::int64_t count, bool is_max,
                   cudaStream_t stream) {
  constexpr int kThreads = 256;
  const std::int64_t blocks = (count + kThreads - 1) / kThreads;
  const int grid = static_cast<int>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
  ordered_reduce_kernel<T><<<grid, kThreads, 0, stream>>>(static_cast<const T*>(staged), slots, stride,
                                                          static_cast<T*>(out), count, is_max);
  return cudaGetLastError();
}

}  // namespace

cudaError_t ordered_reduce_on_device(DType dtype, bool is_max, const void* staged, int slots, std::int64_t stride,
                                     void* out, std::int64_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  switch (dtype) {
    case DType::kF32: return launch<float>(staged, slots, stride, out, count, is_max, stream);
    case DType::kBF16: return launch<__nv_bfloat16>(staged, slots, stride, out, count, is_max, stream);
    case DType::kF16: return launch<__half>(staged, slots, stride, out, count, is_max, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace cleave::comm
