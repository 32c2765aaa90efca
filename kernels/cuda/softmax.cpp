// Checked entry points for the softmax kernels (softmax.hpp); the kernels are in softmax.cu.
#include "kernels/cuda/softmax.hpp"

#include "engine/cuda/cuda_check.hpp"

namespace cleave::kernels::cuda {

void softmax_forward(ConstFloats x, Floats y, int64_t rows, int64_t cols, cudaStream_t stream) {
  CLEAVE_ASSERT(rows >= 0 && cols > 0, "cuda softmax_forward: bad shape [{}, {}]", rows, cols);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_softmax_forward(x, y, rows, cols, false, 1.0f, stream),
                           "softmax_forward_kernel");
}

void softmax_backward(ConstFloats y, ConstFloats dy, Floats dx, int64_t rows, int64_t cols, cudaStream_t stream) {
  CLEAVE_ASSERT(rows >= 0 && cols > 0, "cuda softmax_backward: bad shape [{}, {}]", rows, cols);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_softmax_backward(y, dy, dx, rows, cols, false, 1.0f, stream),
                           "softmax_backward_kernel");
}

void causal_softmax_forward(ConstFloats scores, Floats probs, int64_t rows, int64_t seq, float scale,
                            cudaStream_t stream) {
  CLEAVE_ASSERT(rows >= 0 && seq > 0 && rows % seq == 0, "cuda causal_softmax_forward: {} rows of {} positions",
                rows, seq);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_softmax_forward(scores, probs, rows, seq, true, scale, stream),
                           "softmax_forward_kernel(causal)");
}

void causal_softmax_backward(ConstFloats probs, ConstFloats dprobs, Floats dscores, int64_t rows, int64_t seq,
                             float scale, cudaStream_t stream) {
  CLEAVE_ASSERT(rows >= 0 && seq > 0 && rows % seq == 0, "cuda causal_softmax_backward: {} rows of {} positions",
                rows, seq);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_softmax_backward(probs, dprobs, dscores, rows, seq, true, scale, stream),
                           "softmax_backward_kernel(causal)");
}

}  // namespace cleave::kernels::cuda
