// The ordered total of sum_squares_many (sum_squares_many.hpp): one thread, the CPU's order.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/sum_squares_many.hpp"

namespace cleave::kernels::cuda::detail {
namespace {

__global__ void sum_in_order_kernel(const double* values, int count, double* out) {
  double total = 0.0;
  for (int i = 0; i < count; ++i) total += values[i];
  *out = total;
}

}  // namespace

cudaError_t launch_sum_in_order(const double* values, int count, double* out, cudaStream_t stream) {
  sum_in_order_kernel<<<1, 1, 0, stream>>>(values, count, out);
  return cudaGetLastError();
}

}  // namespace cleave::kernels::cuda::detail
