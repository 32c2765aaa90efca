// Checked entry points for the GELU kernels (gelu.hpp); the kernels are in gelu.cu.
#include "kernels/cuda/gelu.hpp"

#include "engine/cuda/cuda_check.hpp"

namespace cleave::kernels::cuda {

void gelu_forward(ConstFloats x, Floats y, int64_t n, cudaStream_t stream) {
  CLEAVE_ASSERT(n >= 0, "cuda gelu_forward: negative size {}", n);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_gelu_forward(x, y, n, stream), "gelu_forward_kernel");
}

void gelu_backward(ConstFloats x, ConstFloats dy, Floats dx, int64_t n, cudaStream_t stream) {
  CLEAVE_ASSERT(n >= 0, "cuda gelu_backward: negative size {}", n);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_gelu_backward(x, dy, dx, n, stream), "gelu_backward_kernel");
}

}  // namespace cleave::kernels::cuda
