// Element-wise vector helpers used by residual connections, gradient accumulation and clipping.
//
// Invariant: every function touches exactly n elements; outputs may alias inputs element for element.
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

}  // namespace cleave::kernels::cpu
