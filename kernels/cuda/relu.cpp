// Checked entry points for the ReLU kernels (relu.hpp); the kernels are in relu.cu.
#include "kernels/cuda/relu.hpp"

#include "engine/cuda/cuda_check.hpp"

namespace cleave::kernels::cuda {

void relu_forward(ConstFloats x, Floats y, int64_t n, cudaStream_t stream) {
  CLEAVE_ASSERT(n >= 0, "cuda relu_forward: negative size {}", n);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_relu_forward(x, y, n, stream), "relu_forward_kernel");
}

void relu_backward(ConstFloats x, ConstFloats dy, Floats dx, int64_t n, cudaStream_t stream) {
  CLEAVE_ASSERT(n >= 0, "cuda relu_backward: negative size {}", n);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_relu_backward(x, dy, dx, n, stream), "relu_backward_kernel");
}

}  // namespace cleave::kernels::cuda
