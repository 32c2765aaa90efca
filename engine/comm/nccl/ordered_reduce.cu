// Rank-ordered reduction kernel for the NCCL backend's deterministic mode (ordered_reduce.hpp). Each thread
// combines its element's slots in the canonical tree order of engine/core/sum_tree.hpp, in the streaming form
// described there (a stack of power-of-two partial sums, folded from the right at the end), which is the
// order the host's recursive ordered_reduce uses.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "engine/comm/nccl/ordered_reduce.hpp"
#include "kernels/cuda/launch_config.hpp"

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

__device__ __forceinline__ float combine(float left, float right, bool is_max) {
  return is_max ? combine_max(left, right) : __fadd_rn(left, right);
}

constexpr int kMaxDepth = 32;  // floor(log2(INT_MAX)) + 1 partial sums at most

template <typename T>
__global__ void ordered_reduce_kernel(const T* staged, int slots, std::int64_t stride, T* out, std::int64_t count,
                                      bool is_max) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += step) {
    float partial[kMaxDepth];  // partial sums over 2^size[d] slots, sizes strictly decreasing
    int size[kMaxDepth];
    int depth = 0;
    for (int q = 0; q < slots; ++q) {
      float v = load(staged + q * stride, i);
      int n = 0;
      while (depth > 0 && size[depth - 1] == n) {  // equal halves merge, the earlier one on the left
        v = combine(partial[depth - 1], v, is_max);
        --depth;
        ++n;
      }
      partial[depth] = v;
      size[depth] = n;
      ++depth;
    }
    float acc = partial[depth - 1];
    for (int d = depth - 2; d >= 0; --d) acc = combine(partial[d], acc, is_max);
    store(out, i, acc);
  }
}

template <typename T>
cudaError_t launch(const void* staged, int slots, std::int64_t stride, void* out, std::int64_t count, bool is_max,
                   cudaStream_t stream) {
  // The geometry the CPU test and the resource check read (kernels/cuda/launch_config.hpp's catalogue).
  const kernels::cuda::LaunchConfig c = kernels::cuda::launch::ordered_reduce(count);
  ordered_reduce_kernel<T><<<static_cast<unsigned int>(c.grid.x), static_cast<unsigned int>(c.block.x), 0, stream>>>(
      static_cast<const T*>(staged), slots, stride, static_cast<T*>(out), count, is_max);
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
