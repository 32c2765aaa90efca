// Checked entry point for the SGD kernel (sgd.hpp): the CPU kernel's argument checks and messages.
#include "kernels/cuda/sgd.hpp"

#include "engine/cuda/cuda_check.hpp"

namespace cleave::kernels::cuda {

void sgd_update(float* param, ConstFloats grad, float* momentum_buf, int64_t n, float lr, float momentum,
                float weight_decay, bool nesterov, bool first_step, cudaStream_t stream) {
  CLEAVE_ASSERT(n >= 0, "cuda sgd_update: negative size {}", n);
  CLEAVE_CHECK(momentum >= 0.0f, "sgd: momentum must be >= 0, got {}", momentum);
  CLEAVE_CHECK(!nesterov || momentum > 0.0f, "sgd: nesterov momentum requires momentum > 0, got {}", momentum);
  CLEAVE_ASSERT(momentum == 0.0f || momentum_buf != nullptr || n == 0,
                "cuda sgd_update: momentum {} needs a momentum buffer", momentum);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_sgd_update(param, grad, momentum_buf, n, lr, momentum, weight_decay, nesterov,
                                                     first_step, stream),
                           "sgd_plain_kernel/sgd_momentum_kernel");
}

}  // namespace cleave::kernels::cuda
