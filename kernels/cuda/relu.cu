// ReLU kernels (relu.hpp): grid-stride loops, the CPU kernel's comparisons.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/relu.hpp"

namespace cleave::kernels::cuda::detail {
namespace {

__global__ void relu_forward_kernel(ConstFloats x, Floats y, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float v = load(x, i);
    store(y, i, v > 0.0f ? v : 0.0f);
  }
}

__global__ void relu_backward_kernel(ConstFloats x, ConstFloats dy, Floats dx, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) store(dx, i, load(x, i) > 0.0f ? load(dy, i) : 0.0f);
}

}  // namespace

cudaError_t launch_relu_forward(ConstFloats x, Floats y, int64_t n, cudaStream_t stream) {
  return launch_grid_stride(relu_forward_kernel, n, stream, x, y, n);
}

cudaError_t launch_relu_backward(ConstFloats x, ConstFloats dy, Floats dx, int64_t n, cudaStream_t stream) {
  return launch_grid_stride(relu_backward_kernel, n, stream, x, dy, dx, n);
}

}  // namespace cleave::kernels::cuda::detail
