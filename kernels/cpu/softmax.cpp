// Row-wise softmax. See softmax.hpp.
#include "kernels/cpu/softmax.hpp"

#include "engine/core/error.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/vec_math.hpp"

namespace cleave::kernels::cpu {

void softmax_forward(const float* x, float* y, int64_t rows, int64_t cols) {
  CLEAVE_ASSERT(rows >= 0 && cols > 0, "softmax_forward: bad shape [{}, {}]", rows, cols);
#pragma omp parallel for schedule(static) if (detail::worth_parallel(rows * cols))
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    const float mx = detail::max_of(xr, cols);
    const float sum = detail::exp_store_sum(xr, mx, yr, cols);
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) yr[c] *= inv;
  }
}

void softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols) {
  CLEAVE_ASSERT(rows >= 0 && cols > 0, "softmax_backward: bad shape [{}, {}]", rows, cols);
#pragma omp parallel for schedule(static) if (detail::worth_parallel(rows * cols))
  for (int64_t r = 0; r < rows; ++r) {
    const float* yr = y + r * cols;
    const float* dyr = dy + r * cols;
    float* dxr = dx + r * cols;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int64_t c = 0; c < cols; ++c) dot += yr[c] * dyr[c];
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) dxr[c] = yr[c] * (dyr[c] - dot);
  }
}

}  // namespace cleave::kernels::cpu
