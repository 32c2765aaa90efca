// Shared helpers of the seam's CPU op tests (tests/unit/ops): f32 tensors from values, empty host tensors of a
// dtype, casts through ops::copy, the f32 values a bf16 tensor holds (the reference ops' inputs), a bf16 output
// checked as the f32 reference rounded once, and the sum of squares that keeps an all-zero output from passing.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "kernels/ops/ops.hpp"

namespace cleave::ops::test {

inline Tensor f32(const std::vector<float>& v, const Shape& shape) { return Tensor::from_floats(v, shape); }

inline Tensor empty(const Shape& shape, DType dtype = DType::kF32) {
  return Tensor::empty(shape, dtype, MemoryCategory::kActivations, cpu_allocator());
}

inline Tensor cast(const Context& ctx, const Tensor& t, DType dtype) {
  Tensor out = empty(t.shape(), dtype);
  copy(ctx, t, out);
  return out;
}

// What a bf16 tensor holds, widened: the f32 values the reference ops read.
inline Tensor rounded(const Context& ctx, const std::vector<float>& v, const Shape& shape) {
  return cast(ctx, cast(ctx, f32(v, shape), DType::kBF16), DType::kF32);
}

inline double norm(const Tensor& t) {
  double s = 0;
  for (float x : t.to_floats()) s += static_cast<double>(x) * x;
  return s;
}

// `got16` (bf16) is the f32 reference `want32` rounded once, and not all zero.
inline void expect_rounded_once(const Context& ctx, const Tensor& got16, const Tensor& want32, const char* what) {
  EXPECT_EQ(got16.to_floats(), cast(ctx, want32, DType::kBF16).to_floats()) << what;
  EXPECT_GT(norm(got16), 0.0) << what;
}

}  // namespace cleave::ops::test
