// Integer inputs for the seam parity tests (token ids, targets) and an exact comparison of integer outputs
// (arg-max), built only on OpsParity's float API (random f32 inputs, to_cpu), so they work with any
// implementation of tests/gpu/ops/parity_util.hpp.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "tests/gpu/ops/parity_util.hpp"

namespace cleave::testing {

// A CPU i32 tensor of integers drawn uniformly from [lo, hi] (from `uniform`, a CPU f32 tensor of the same shape
// drawn from [lo, hi + 1)).
inline Tensor ints_from_uniform(const Tensor& uniform, Tensor out, std::int32_t lo, std::int32_t hi) {
  const float* u = uniform.data<float>();
  std::int32_t* o = out.data<std::int32_t>();
  for (std::int64_t i = 0; i < out.numel(); ++i) {
    o[i] = std::clamp(static_cast<std::int32_t>(std::floor(u[i])), lo, hi);
  }
  return out;
}

// got (any device) and want (CPU), both i32: equal element by element.
inline void expect_equal_ints(const Tensor& want, const Tensor& got_cpu, const std::string& what) {
  ASSERT_EQ(want.numel(), got_cpu.numel()) << what;
  std::int64_t wrong = 0;
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    const std::int32_t w = want.data<std::int32_t>()[i], g = got_cpu.data<std::int32_t>()[i];
    if (w != g) {
      if (wrong < 5) ADD_FAILURE() << what << "[" << i << "]: gpu " << g << ", cpu " << w;
      ++wrong;
    }
  }
  EXPECT_EQ(wrong, 0) << what << ": " << wrong << " of " << want.numel() << " differ";
}

}  // namespace cleave::testing
