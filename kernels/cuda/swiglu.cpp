// Checked entry points for the SwiGLU kernels (swiglu.hpp); the kernels are in swiglu.cu.
#include "kernels/cuda/swiglu.hpp"

#include "engine/cuda/cuda_check.hpp"

namespace cleave::kernels::cuda {

void swiglu_forward(ConstFloats gate, ConstFloats up, Floats h, int64_t n, cudaStream_t stream) {
  CLEAVE_ASSERT(n >= 0, "cuda swiglu_forward: negative size {}", n);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_swiglu_forward(gate, up, h, n, stream), "swiglu_forward_kernel");
}

void swiglu_backward(ConstFloats gate, ConstFloats up, ConstFloats dh, Floats dgate, Floats dup, int64_t n,
                     cudaStream_t stream) {
  CLEAVE_ASSERT(n >= 0, "cuda swiglu_backward: negative size {}", n);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_swiglu_backward(gate, up, dh, dgate, dup, n, stream),
                           "swiglu_backward_kernel");
}

}  // namespace cleave::kernels::cuda
