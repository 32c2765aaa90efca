// Row-wise softmax. See softmax.hpp.
#include "kernels/cpu/softmax.hpp"

#include "engine/core/error.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/vec_math.hpp"

namespace cleave::kernels::cpu {
namespace {

// One row of each kernel, compiled once (noinline) so that the parallel and the serial branch of
// CLEAVE_PARALLEL_FOR run the same vectorised reduction (and a row body may hold `omp simd`).
[[gnu::noinline]] void forward_row(const float* xr, float* yr, int64_t cols) {
  const float mx = detail::max_of(xr, cols);
  const float sum = detail::exp_store_sum(xr, mx, yr, cols);
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int64_t c = 0; c < cols; ++c) yr[c] *= inv;
}

[[gnu::noinline]] void backward_row(const float* yr, const float* dyr, float* dxr, int64_t cols) {
  float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
  for (int64_t c = 0; c < cols; ++c) dot += yr[c] * dyr[c];
#pragma omp simd
  for (int64_t c = 0; c < cols; ++c) dxr[c] = yr[c] * (dyr[c] - dot);
}

}  // namespace

void softmax_forward(const float* x, float* y, int64_t rows, int64_t cols) {
  CLEAVE_ASSERT(rows >= 0 && cols > 0, "softmax_forward: bad shape [{}, {}]", rows, cols);
  CLEAVE_PARALLEL_FOR(r, rows, detail::worth_parallel(rows * cols), forward_row(x + r * cols, y + r * cols, cols);)
}

void softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols) {
  CLEAVE_ASSERT(rows >= 0 && cols > 0, "softmax_backward: bad shape [{}, {}]", rows, cols);
  CLEAVE_PARALLEL_FOR(r, rows, detail::worth_parallel(rows * cols),
                      backward_row(y + r * cols, dy + r * cols, dx + r * cols, cols);)
}

}  // namespace cleave::kernels::cpu
