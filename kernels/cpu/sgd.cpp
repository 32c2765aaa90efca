// SGD with momentum, torch.optim.SGD semantics (dampening 0). See sgd.hpp.
#include "kernels/cpu/sgd.hpp"

#include "engine/core/error.hpp"
#include "kernels/cpu/multi_tensor.hpp"
#include "kernels/cpu/parallel.hpp"

namespace cleave::kernels::cpu {
namespace {

void check_hyper(float momentum, bool nesterov) {
  CLEAVE_CHECK(momentum >= 0.0f, "sgd: momentum must be >= 0, got {}", momentum);
  CLEAVE_CHECK(!nesterov || momentum > 0.0f, "sgd: nesterov momentum requires momentum > 0, got {}", momentum);
}

// Elements [begin, end) of one tensor: sgd_update's element arithmetic.
void sgd_range(const SgdTensor& t, int64_t begin, int64_t end, float lr, float momentum, bool nesterov,
               bool first_step) {
  float* param = t.param;
  const float* grad = t.grad;
  float* momentum_buf = t.momentum_buf;
  const float weight_decay = t.weight_decay;
  if (momentum == 0.0f) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) param[i] -= lr * (grad[i] + weight_decay * param[i]);
    return;
  }
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    const float g = grad[i] + weight_decay * param[i];
    const float buf = first_step ? g : momentum * momentum_buf[i] + g;
    momentum_buf[i] = buf;
    param[i] -= lr * (nesterov ? g + momentum * buf : buf);
  }
}

}  // namespace

void sgd_update(float* param, const float* grad, float* momentum_buf, int64_t n, float lr, float momentum,
                float weight_decay, bool nesterov, bool first_step) {
  CLEAVE_ASSERT(n >= 0, "sgd_update: negative size {}", n);
  check_hyper(momentum, nesterov);
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

void sgd_update_many(const SgdTensor* tensors, int64_t count, float lr, float momentum, bool nesterov,
                     bool first_step) {
  CLEAVE_ASSERT(count >= 0, "sgd_update_many: negative tensor count {}", count);
  check_hyper(momentum, nesterov);
  int64_t total = 0;
  for (int64_t t = 0; t < count; ++t) {
    CLEAVE_ASSERT(tensors[t].n >= 0, "sgd_update_many: tensor {} has negative size {}", t, tensors[t].n);
    CLEAVE_ASSERT(momentum == 0.0f || tensors[t].momentum_buf != nullptr || tensors[t].n == 0,
                  "sgd_update_many: momentum {} needs a momentum buffer (tensor {})", momentum, t);
    total += tensors[t].n;
  }
  detail::for_each_piece(
      count, [&](int64_t t) { return tensors[t].n; }, detail::worth_parallel(total),
      [&](int64_t t, int64_t begin, int64_t end) {
        sgd_range(tensors[t], begin, end, lr, momentum, nesterov, first_step);
      });
}

}  // namespace cleave::kernels::cpu
