// SGD with momentum, PyTorch torch.optim.SGD semantics (dampening 0).
//
//   g = grad + weight_decay * param          (coupled L2 decay, as PyTorch)
//   if momentum != 0:  buf = first_step ? g : momentum * buf + g
//                      g = nesterov ? g + momentum * buf : buf
//   param -= lr * g
// first_step is true on the first update of this parameter (PyTorch initialises the buffer with the
// gradient instead of decaying a zero buffer); momentum_buf may be null when momentum == 0. The caller
// owns the buffer and the step count. nesterov requires momentum > 0 (CLEAVE_CHECK, as PyTorch).
//
// sgd_update_many updates several tensors in one OpenMP team (pieces of the concatenated index space,
// multi_tensor.hpp) with the bits of sgd_update on each in turn, for any thread count.
#pragma once

#include <cstdint>

namespace cleave::kernels::cpu {

void sgd_update(float* param, const float* grad, float* momentum_buf, int64_t n, float lr, float momentum,
                float weight_decay, bool nesterov, bool first_step);

// One tensor of a multi-tensor update: n elements of param, grad and momentum_buf (null when momentum == 0),
// with its own weight decay.
struct SgdTensor {
  float* param;
  const float* grad;
  float* momentum_buf;
  int64_t n;
  float weight_decay;
};
void sgd_update_many(const SgdTensor* tensors, int64_t count, float lr, float momentum, bool nesterov,
                     bool first_step);

}  // namespace cleave::kernels::cpu
