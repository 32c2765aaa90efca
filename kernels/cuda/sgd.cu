// SGD kernel (sgd.hpp): element-wise, memory-bound; explicit-rounding intrinsics keep nvcc from contracting
// into FMAs, so the arithmetic is the CPU kernel's.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/sgd.hpp"

namespace cleave::kernels::cuda::detail {
namespace {

__global__ void sgd_plain_kernel(float* param, ConstFloats grad, int64_t n, float lr, float weight_decay) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float g = __fadd_rn(load(grad, i), __fmul_rn(weight_decay, param[i]));
    param[i] = __fsub_rn(param[i], __fmul_rn(lr, g));
  }
}

__global__ void sgd_momentum_kernel(float* param, ConstFloats grad, float* momentum_buf, int64_t n, float lr,
                                    float momentum, float weight_decay, bool nesterov, bool first_step) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float g = __fadd_rn(load(grad, i), __fmul_rn(weight_decay, param[i]));
    const float buf = first_step ? g : __fadd_rn(__fmul_rn(momentum, momentum_buf[i]), g);
    momentum_buf[i] = buf;
    const float step = nesterov ? __fadd_rn(g, __fmul_rn(momentum, buf)) : buf;
    param[i] = __fsub_rn(param[i], __fmul_rn(lr, step));
  }
}

}  // namespace

cudaError_t launch_sgd_update(float* param, ConstFloats grad, float* momentum_buf, int64_t n, float lr, float momentum,
                              float weight_decay, bool nesterov, bool first_step, cudaStream_t stream) {
  if (momentum == 0.0f) return launch_grid_stride(sgd_plain_kernel, n, stream, param, grad, n, lr, weight_decay);
  return launch_grid_stride(sgd_momentum_kernel, n, stream, param, grad, momentum_buf, n, lr, momentum, weight_decay,
                            nesterov, first_step);
}

}  // namespace cleave::kernels::cuda::detail
