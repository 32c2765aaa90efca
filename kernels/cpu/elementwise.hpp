// Element-wise vector helpers used by residual connections, gradient accumulation and clipping.
//
// Invariant: every function touches exactly n elements; outputs may alias inputs element for element. The *_many
// forms run several tensors in one OpenMP team (kernels/cpu/multi_tensor.hpp) and give the bits of the
// single-tensor form on each tensor in turn, at any thread count; their tensors must not overlap.
#pragma once

#include <cstdint>

#include "kernels/exact_square_sum.hpp"

namespace cleave::kernels::cpu {

void add(const float* a, const float* b, float* out, int64_t n);  // out = a + b
void add_inplace(float* y, const float* x, int64_t n);            // y += x
void scale_inplace(float* y, float alpha, int64_t n);             // y *= alpha
void axpy(float alpha, const float* x, float* y, int64_t n);      // y += alpha * x
double sum_squares(const float* x, int64_t n);                    // sum x^2, accumulated in double
// acc += Σ x² exactly (kernels/exact_square_sum.hpp); the result does not depend on threads or splits.
void sum_squares_exact(const float* x, int64_t n, ExactSquareSum& acc);

// One tensor of a *_many call.
struct FloatSpan {
  float* data;
  int64_t n;
};
struct ConstFloatSpan {
  const float* data;
  int64_t n;
};
// scale_inplace on each of the count tensors (the gradient clip's scale: one team per step, not one per tensor).
void scale_inplace_many(const FloatSpan* ys, int64_t count, float alpha);
// acc += Σ over the count tensors of Σ x² exactly: the digits of sum_squares_exact on each in turn (the sum is
// exact, so any split and merge order gives them), in one team for all tensors.
void sum_squares_exact_many(const ConstFloatSpan* xs, int64_t count, ExactSquareSum& acc);

}  // namespace cleave::kernels::cpu
