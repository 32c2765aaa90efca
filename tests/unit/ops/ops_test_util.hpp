// Shared helpers of the seam's CPU op tests (tests/unit/ops): f32 tensors from values, empty host tensors of a
// dtype, casts through ops::copy, the f32 values a bf16 tensor holds (the reference ops' inputs), a bf16 output
// checked as the f32 reference rounded once, the sum of squares that keeps an all-zero output from passing, an
// element-for-element comparison of bits, the fixture of the tests run at 1 and 2 CPU threads, and the message of a
// refusal.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/core/error.hpp"
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

// A host tensor of `dtype` holding `v` (narrowed once through ops::copy when dtype is not f32).
inline Tensor tensor_of(const std::vector<float>& v, const Shape& shape, DType dtype) {
  Tensor f = f32(v, shape);
  if (dtype == DType::kF32) return f;
  return cast(Context{}, f, dtype);
}

// An empty host tensor of t's shape.
inline Tensor like(const Tensor& t, DType dtype) { return empty(t.shape(), dtype); }

// `got` equals `want` element for element (a NaN matches a NaN; the first three differences are named), and `want`
// is not all zero unless it has a single element and single_may_be_zero (ReLU of a negative, LayerNorm's gradient
// over one column).
inline void expect_same_floats(const std::vector<float>& got, const std::vector<float>& want, const std::string& what,
                               bool single_may_be_zero = false) {
  ASSERT_EQ(got.size(), want.size()) << what;
  std::int64_t wrong = 0;
  double sum_squares = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool same = got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i]));
    if (!same && ++wrong <= 3) ADD_FAILURE() << what << ": element " << i << " got " << got[i] << " want " << want[i];
    sum_squares += static_cast<double>(want[i]) * want[i];
  }
  EXPECT_EQ(wrong, 0) << what;
  if (!single_may_be_zero || got.size() > 1) {
    EXPECT_GT(sum_squares, 0.0) << what << ": an all-zero output cannot pass";
  }
}

// A test run at GetParam() CPU threads (the setting restored after it), with a CPU context.
class CpuThreadsTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    saved_ = cpu_threads();
    configure_cpu_threads(GetParam());
  }
  void TearDown() override { configure_cpu_threads(saved_); }
  Context ctx_;
  int saved_ = 1;
};

// The message of the cleave::Error `f` throws ("" when it throws none).
inline std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// `f` is refused with a cleave::Error whose message holds `part` (the op's name and the numbers it objects to).
inline void expect_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning: " << part;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

}  // namespace cleave::ops::test
