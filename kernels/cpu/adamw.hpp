// AdamW update, PyTorch torch.optim.AdamW semantics (decoupled weight decay, bias correction).
//
// For each element, with step >= 1 (the 1-based count of updates including this one):
//   param -= lr * weight_decay * param
//   m = beta1 m + (1 - beta1) g;   v = beta2 v + (1 - beta2) g^2
//   param -= lr * (m / (1 - beta1^step)) / (sqrt(v / (1 - beta2^step)) + eps)
// Invariant: m and v are the caller's optimizer state (zero-initialised before step 1), updated in place.
//
// adamw_update_many updates several tensors (a rank's parameters) in one OpenMP team, its work cut over the
// concatenated index space in pieces of whole vectors; every element gets the arithmetic adamw_update gives it, so
// the bits are those of adamw_update on each tensor in turn, for any thread count (issue 39: one team per step
// instead of one per parameter).
#pragma once

#include <cstdint>

#include "kernels/cpu/vector_isa.hpp"

namespace cleave::kernels::cpu {

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                  float eps, float weight_decay, int64_t step);

// One tensor of a multi-tensor update: n elements of param, grad, m, v, with its own weight decay.
struct AdamWTensor {
  float* param;
  const float* grad;
  float* m;
  float* v;
  int64_t n;
  float weight_decay;
};
void adamw_update_many(const AdamWTensor* tensors, int64_t count, float lr, float beta1, float beta2, float eps,
                       int64_t step);

// One vector path (vector_isa.hpp); the two above run the widest. Every path gives the same bits. For tests and
// benchmarks.
void adamw_update_isa(VectorIsa isa, float* param, const float* grad, float* m, float* v, int64_t n, float lr,
                      float beta1, float beta2, float eps, float weight_decay, int64_t step);
void adamw_update_many_isa(VectorIsa isa, const AdamWTensor* tensors, int64_t count, float lr, float beta1,
                           float beta2, float eps, int64_t step);

}  // namespace cleave::kernels::cpu
