// ReLU. See relu.hpp.
#include "kernels/cpu/relu.hpp"

#include "engine/core/error.hpp"
#include "kernels/cpu/parallel.hpp"

namespace cleave::kernels::cpu {

void relu_forward(const float* x, float* y, int64_t n) {
  CLEAVE_ASSERT(n >= 0, "relu_forward: negative size {}", n);
  CLEAVE_PARALLEL_FOR_SIMD(i, n, detail::worth_parallel_streaming(n), y[i] = x[i] > 0.0f ? x[i] : 0.0f;)
}

void relu_backward(const float* x, const float* dy, float* dx, int64_t n) {
  CLEAVE_ASSERT(n >= 0, "relu_backward: negative size {}", n);
  CLEAVE_PARALLEL_FOR_SIMD(i, n, detail::worth_parallel_streaming(n), dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;)
}

}  // namespace cleave::kernels::cpu
