// RMSNorm forward / backward. See rmsnorm.hpp. Rows are independent (parallel over rows); the weight
// gradient is a column reduction done by column blocks, each summing its rows in order (deterministic).
#include "kernels/cpu/rmsnorm.hpp"

#include <algorithm>
#include <cmath>

#include "engine/core/error.hpp"
#include "kernels/cpu/parallel.hpp"

namespace cleave::kernels::cpu {

void rmsnorm_forward(const float* x, const float* weight, float* y, float* rstd, int64_t rows, int64_t cols,
                     float eps) {
  CLEAVE_ASSERT(rows >= 0 && cols > 0, "rmsnorm_forward: bad shape [{}, {}]", rows, cols);
  CLEAVE_ASSERT(eps > 0.0f, "rmsnorm_forward: eps must be > 0, got {}", eps);
#pragma omp parallel for schedule(static) if (detail::worth_parallel(rows * cols))
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (int64_t c = 0; c < cols; ++c) sq += xr[c] * xr[c];
    const float rs = 1.0f / std::sqrt(sq / static_cast<float>(cols) + eps);
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] * rs * weight[c];
    rstd[r] = rs;
  }
}

void rmsnorm_backward_input(const float* dy, const float* x, const float* weight, const float* rstd, float* dx,
                            int64_t rows, int64_t cols) {
  CLEAVE_ASSERT(rows >= 0 && cols > 0, "rmsnorm_backward_input: bad shape [{}, {}]", rows, cols);
#pragma omp parallel for schedule(static) if (detail::worth_parallel(rows * cols))
  for (int64_t r = 0; r < rows; ++r) {
    const float* dyr = dy + r * cols;
    const float* xr = x + r * cols;
    float* dxr = dx + r * cols;
    const float rs = rstd[r];
    float dot = 0.0f;  // sum_c dy * w * x
#pragma omp simd reduction(+ : dot)
    for (int64_t c = 0; c < cols; ++c) dot += dyr[c] * weight[c] * xr[c];
    const float k = rs * rs * rs * dot / static_cast<float>(cols);
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) dxr[c] = rs * dyr[c] * weight[c] - k * xr[c];
  }
}

void rmsnorm_backward_weight(const float* dy, const float* x, const float* rstd, float* dweight, int64_t rows,
                             int64_t cols) {
  CLEAVE_ASSERT(rows >= 0 && cols > 0, "rmsnorm_backward_weight: bad shape [{}, {}]", rows, cols);
  constexpr int64_t kBlock = 128;
  const int64_t blocks = (cols + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (blocks > 1 && detail::worth_parallel(rows * cols))
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kBlock;
    const int64_t width = std::min(kBlock, cols - c0);
    float acc[kBlock] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const float* dyr = dy + r * cols + c0;
      const float* xr = x + r * cols + c0;
      const float rs = rstd[r];
#pragma omp simd
      for (int64_t c = 0; c < width; ++c) acc[c] += dyr[c] * xr[c] * rs;
    }
    for (int64_t c = 0; c < width; ++c) dweight[c0 + c] += acc[c];
  }
}

}  // namespace cleave::kernels::cpu
