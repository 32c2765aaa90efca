// LayerNorm forward / backward. See layernorm.hpp. Rows are independent (parallel over rows); the weight
// gradient is a column reduction done by column blocks, each summing its rows in order (deterministic).
#include "kernels/cpu/layernorm.hpp"

#include <algorithm>
#include <cmath>

#include "engine/core/error.hpp"
#include "kernels/cpu/bf16_vectors.hpp"
#include "kernels/cpu/parallel.hpp"

namespace cleave::kernels::cpu {

namespace {

// One row of each row-wise kernel, compiled once (noinline) so that the parallel and the serial branch of
// CLEAVE_PARALLEL_FOR run the same vectorised reduction, whatever the compiler makes of it.
[[gnu::noinline]] void forward_row(const float* xr, const float* gamma, const float* beta, float* yr, float* mean,
                                   float* rstd, int64_t cols, float eps) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t c = 0; c < cols; ++c) sum += xr[c];
  const float mu = sum / static_cast<float>(cols);
  float sq = 0.0f;  // two-pass variance: no cancellation for rows with a large mean
#pragma omp simd reduction(+ : sq)
  for (int64_t c = 0; c < cols; ++c) {
    const float d = xr[c] - mu;
    sq += d * d;
  }
  const float rs = 1.0f / std::sqrt(sq / static_cast<float>(cols) + eps);
#pragma omp simd
  for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mu) * rs * gamma[c] + beta[c];
  *mean = mu;
  *rstd = rs;
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * gamma.
[[gnu::noinline]] void backward_input_row(const float* dyr, const float* xr, const float* gamma, float mu, float rs,
                                          float* dxr, int64_t cols) {
  float sum_g = 0.0f;
  float sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_g, sum_gx)
  for (int64_t c = 0; c < cols; ++c) {
    const float g = dyr[c] * gamma[c];
    sum_g += g;
    sum_gx += g * (xr[c] - mu) * rs;
  }
  const float mean_g = sum_g / static_cast<float>(cols);
  const float mean_gx = sum_gx / static_cast<float>(cols);
#pragma omp simd
  for (int64_t c = 0; c < cols; ++c) {
    const float xhat = (xr[c] - mu) * rs;
    dxr[c] = rs * (dyr[c] * gamma[c] - mean_g - xhat * mean_gx);
  }
}

constexpr int64_t kWeightBlock = 128;  // columns per block of the weight gradient

// Columns [c0, c0 + kWeightBlock) of dgamma and dbeta, every row summed in row order (bf16 elements widened as they
// are loaded: the same f32 sums as over widened copies of dy and x).
template <class T>
[[gnu::noinline]] void backward_weight_block(const T* dy, const T* x, const float* mean, const float* rstd,
                                             float* dgamma, float* dbeta, int64_t rows, int64_t cols, int64_t c0) {
  const int64_t width = std::min(kWeightBlock, cols - c0);
  float acc_gamma[kWeightBlock] = {};
  float acc_beta[kWeightBlock] = {};
  for (int64_t r = 0; r < rows; ++r) {
    const T* dyr = dy + r * cols + c0;
    const T* xr = x + r * cols + c0;
    const float mu = mean[r];
    const float rs = rstd[r];
#pragma omp simd
    for (int64_t c = 0; c < width; ++c) {
      const float g = detail::to_f32(dyr[c]);
      acc_gamma[c] += g * (detail::to_f32(xr[c]) - mu) * rs;
      acc_beta[c] += g;
    }
  }
  for (int64_t c = 0; c < width; ++c) {
    dgamma[c0 + c] += acc_gamma[c];
    dbeta[c0 + c] += acc_beta[c];
  }
}

template <class T>
void backward_weight(const T* dy, const T* x, const float* mean, const float* rstd, float* dgamma, float* dbeta,
                     int64_t rows, int64_t cols) {
  CLEAVE_ASSERT(rows >= 0 && cols > 0, "layernorm_backward_weight: bad shape [{}, {}]", rows, cols);
  const int64_t blocks = (cols + kWeightBlock - 1) / kWeightBlock;
  CLEAVE_PARALLEL_FOR(blk, blocks, blocks > 1 && detail::worth_parallel(rows * cols),
                      backward_weight_block(dy, x, mean, rstd, dgamma, dbeta, rows, cols, blk * kWeightBlock);)
}

}  // namespace

void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                       int64_t rows, int64_t cols, float eps) {
  CLEAVE_ASSERT(rows >= 0 && cols > 0, "layernorm_forward: bad shape [{}, {}]", rows, cols);
  CLEAVE_ASSERT(eps >= 0.0f, "layernorm_forward: negative eps {}", eps);
  CLEAVE_PARALLEL_FOR(r, rows, detail::worth_parallel(rows * cols),
                      forward_row(x + r * cols, gamma, beta, y + r * cols, mean + r, rstd + r, cols, eps);)
}

void layernorm_backward_input(const float* dy, const float* x, const float* gamma, const float* mean, const float* rstd,
                              float* dx, int64_t rows, int64_t cols) {
  CLEAVE_ASSERT(rows >= 0 && cols > 0, "layernorm_backward_input: bad shape [{}, {}]", rows, cols);
  CLEAVE_PARALLEL_FOR(r, rows, detail::worth_parallel(rows * cols),
                      backward_input_row(dy + r * cols, x + r * cols, gamma, mean[r], rstd[r], dx + r * cols, cols);)
}

void layernorm_backward_weight(const float* dy, const float* x, const float* mean, const float* rstd, float* dgamma,
                               float* dbeta, int64_t rows, int64_t cols) {
  backward_weight(dy, x, mean, rstd, dgamma, dbeta, rows, cols);
}

void layernorm_backward_weight(const std::uint16_t* dy, const std::uint16_t* x, const float* mean, const float* rstd,
                               float* dgamma, float* dbeta, int64_t rows, int64_t cols) {
  backward_weight(dy, x, mean, rstd, dgamma, dbeta, rows, cols);
}

}  // namespace cleave::kernels::cpu
