// The exact sum-of-squares kernel (sum_squares_exact.hpp): per-thread fixed-point digits, integer atomics.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/sum_squares_exact.hpp"

namespace cleave::kernels::cuda::detail {
namespace {

constexpr unsigned kDigits = ExactSquareSum::kDigits;
constexpr unsigned kWords = kDigits + 2;

__global__ void sum_squares_exact_kernel(const float* x, int64_t n, ExactSquareSum* acc) {
  __shared__ unsigned long long block[kWords];
  if (threadIdx.x < kWords) block[threadIdx.x] = 0;
  __syncthreads();
  ExactSquareSum mine;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) mine.add_square(x[i]);
  mine.normalize();
  for (unsigned d = 0; d < kDigits; ++d) {
    if (mine.digit[d] != 0) atomicAdd(&block[d], static_cast<unsigned long long>(mine.digit[d]));
  }
  if (mine.nan != 0) atomicAdd(&block[kWords - 2], static_cast<unsigned long long>(mine.nan));
  if (mine.inf != 0) atomicAdd(&block[kWords - 1], static_cast<unsigned long long>(mine.inf));
  __syncthreads();
  if (threadIdx.x == 0) {  // carry, so every word sent to the grid total is < 2^32 (headroom for many blocks)
    for (unsigned d = 0; d + 1 < kDigits; ++d) {
      block[d + 1] += block[d] >> 32;
      block[d] &= 0xffffffffull;
    }
  }
  __syncthreads();
  if (threadIdx.x < kWords && block[threadIdx.x] != 0) {
    unsigned long long* out = threadIdx.x < kDigits
                                  ? reinterpret_cast<unsigned long long*>(&acc->digit[threadIdx.x])
                                  : (threadIdx.x == kWords - 2 ? reinterpret_cast<unsigned long long*>(&acc->nan)
                                                               : reinterpret_cast<unsigned long long*>(&acc->inf));
    atomicAdd(out, block[threadIdx.x]);
  }
}

}  // namespace

cudaError_t launch_sum_squares_exact(const float* x, int64_t n, ExactSquareSum* acc, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const LaunchConfig config = launch::sum_squares_exact(n);
  sum_squares_exact_kernel<<<to_grid(config), to_block(config), 0, stream>>>(x, n, acc);
  return cudaGetLastError();
}

}  // namespace cleave::kernels::cuda::detail
