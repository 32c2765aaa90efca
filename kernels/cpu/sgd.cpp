// SGD with momentum, torch.optim.SGD semantics (dampening 0). See sgd.hpp.
#include "kernels/cpu/sgd.hpp"

#include "engine/core/error.hpp"
#include "kernels/cpu/parallel.hpp"

namespace cleave::kernels::cpu {

void sgd_update(float* param, const float* grad, float* momentum_buf, int64_t n, float lr, float momentum,
                float weight_decay, bool nesterov, bool first_step) {
  CLEAVE_ASSERT(n >= 0, "sgd_update: negative size {}", n);
  CLEAVE_CHECK(momentum >= 0.0f, "sgd: momentum must be >= 0, got {}", momentum);
  CLEAVE_CHECK(!nesterov || momentum > 0.0f, "sgd: nesterov momentum requires momentum > 0, got {}", momentum);
  if (momentum == 0.0f) {
    CLEAVE_PARALLEL_FOR_SIMD(i, n, detail::worth_parallel(n), param[i] -= lr * (grad[i] + weight_decay * param[i]);)
    return;
  }
  CLEAVE_ASSERT(momentum_buf != nullptr || n == 0, "sgd_update: momentum {} needs a momentum buffer", momentum);
  CLEAVE_PARALLEL_FOR_SIMD(i, n, detail::worth_parallel(n),
    const float g = grad[i] + weight_decay * param[i];
    const float buf = first_step ? g : momentum * momentum_buf[i] + g;
    momentum_buf[i] = buf;
    param[i] -= lr * (nesterov ? g + momentum * buf : buf);)
}

}  // namespace cleave::kernels::cpu
