// LayerNorm forward / backward. See layernorm.hpp. Rows are independent (parallel over rows); the weight
// gradient is a column reduction done by column blocks, each summing its rows in order (deterministic).
//
// The weight gradient has three paths (issue 39 part 4), like rmsnorm.cpp's: written once over generic vectors, run
// on the baseline's vectors, AVX2 or AVX-512, chosen at run time. A block is 64 columns whose sums stay in registers
// over the rows (the `omp simd` loop it replaces ran 4 lanes wide with its sums in memory, 128 columns a block, so a
// d 256 model's gradient was 2 blocks: one a thread at 2 threads, none for a third). The blocks share a team only from
// 512K elements (detail::worth_parallel_columns of 4 operations an element): the small GPT's 1024 x 256 gradient took
// 1.3x as long on a team under passive waiting as on one thread. Every column is still summed
// over its rows in row order from +0 with the same operations, without contraction into FMA, so every path, block
// width and thread count gives the bits of the serial loop
// (KernelLayerNormWeight.PathsAndThreadCountsGiveTheRowOrderBits).
#include "kernels/cpu/layernorm.hpp"

// Wide vectors never cross a call boundary here (the helpers are always_inline), so the ABI note GCC emits for
// 32- and 64-byte vector arguments without AVX does not apply (before vec_math.hpp, where it is reported).
#pragma GCC diagnostic ignored "-Wpsabi"

#include <algorithm>
#include <cmath>

#include "engine/core/error.hpp"
#include "kernels/cpu/bf16_vectors.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/vec_math.hpp"
#include "kernels/cpu/wide_vectors.hpp"

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

constexpr int64_t kWeightBlock = 64;  // columns per block of the weight gradient (2 x 4 AVX-512 vectors)

// Columns [c0, c0 + kWeightBlock) of dgamma and dbeta, every row summed in row order from +0 (bf16 elements widened
// as they are loaded: the same f32 sums as over widened copies of dy and x). A full block keeps its sums in
// registers; the last, narrower one sums column by column with the same operations.
template <class F, int64_t L, class T>
[[gnu::always_inline]] inline void backward_weight_block(const T* dy, const T* x, const float* mean, const float* rstd,
                                                         float* dgamma, float* dbeta, int64_t rows, int64_t cols,
                                                         int64_t c0) {
  const int64_t width = std::min(kWeightBlock, cols - c0);
  float sum_gamma[kWeightBlock] = {};
  float sum_beta[kWeightBlock] = {};
  if (width == kWeightBlock) {
    constexpr int64_t K = kWeightBlock / L;
    F acc_gamma[K];
    F acc_beta[K];
    for (int64_t k = 0; k < K; ++k) acc_gamma[k] = acc_beta[k] = F{};
    for (int64_t r = 0; r < rows; ++r) {
      const T* dyr = dy + r * cols + c0;
      const T* xr = x + r * cols + c0;
      const F mu = detail::broadcast<F>(mean[r]);
      const F rs = detail::broadcast<F>(rstd[r]);
      for (int64_t k = 0; k < K; ++k) {
        const F g = detail::load_as_f32<F>(dyr + k * L);
        acc_gamma[k] += g * (detail::load_as_f32<F>(xr + k * L) - mu) * rs;
        acc_beta[k] += g;
      }
    }
    for (int64_t k = 0; k < K; ++k) {
      detail::store(sum_gamma + k * L, acc_gamma[k]);
      detail::store(sum_beta + k * L, acc_beta[k]);
    }
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      const T* dyr = dy + r * cols + c0;
      const T* xr = x + r * cols + c0;
      const float mu = mean[r];
      const float rs = rstd[r];
      for (int64_t c = 0; c < width; ++c) {
        const float g = detail::to_f32(dyr[c]);
        sum_gamma[c] += g * (detail::to_f32(xr[c]) - mu) * rs;
        sum_beta[c] += g;
      }
    }
  }
  for (int64_t c = 0; c < width; ++c) {
    dgamma[c0 + c] += sum_gamma[c];
    dbeta[c0 + c] += sum_beta[c];
  }
}

// The loop is spelled out per path (a macro, not a template) because OpenMP outlines a parallel region into a
// function that takes the target of the function it is written in.
#define CLEAVE_LAYERNORM_WEIGHT_PATHS(suffix, F, lanes, ...)                                                     \
  template <class T>                                                                                             \
  __VA_ARGS__ void backward_weight_##suffix(const T* dy, const T* x, const float* mean, const float* rstd,       \
                                            float* dgamma, float* dbeta, int64_t rows, int64_t cols) {           \
    const int64_t blocks = (cols + kWeightBlock - 1) / kWeightBlock;                                             \
    CLEAVE_PARALLEL_FOR(blk, blocks, blocks > 1 && detail::worth_parallel_columns(4 * rows * cols),              \
      backward_weight_block<F, lanes>(dy, x, mean, rstd, dgamma, dbeta, rows, cols, blk * kWeightBlock);)         \
  }

CLEAVE_LAYERNORM_WEIGHT_PATHS(baseline, detail::f32xN, detail::kLanes, __attribute__((optimize("fp-contract=off"))))
#if defined(__x86_64__)
CLEAVE_LAYERNORM_WEIGHT_PATHS(avx2, detail::f32x8, 8, __attribute__((target("avx2"), optimize("fp-contract=off"))))
CLEAVE_LAYERNORM_WEIGHT_PATHS(avx512, detail::f32x16, 16,
                              __attribute__((target("avx512f"), optimize("fp-contract=off"))))
#endif
#undef CLEAVE_LAYERNORM_WEIGHT_PATHS

template <class T>
using BackwardWeightFn = void(const T*, const T*, const float*, const float*, float*, float*, int64_t, int64_t);

template <class T>
void backward_weight(VectorIsa isa, const T* dy, const T* x, const float* mean, const float* rstd, float* dgamma,
                     float* dbeta, int64_t rows, int64_t cols) {
  CLEAVE_ASSERT(rows >= 0 && cols > 0, "layernorm_backward_weight: bad shape [{}, {}]", rows, cols);
  isa_path<BackwardWeightFn<T>>(isa, "layernorm_backward_weight", CLEAVE_ISA_PATHS(backward_weight))(
      dy, x, mean, rstd, dgamma, dbeta, rows, cols);
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

void layernorm_backward_weight_isa(VectorIsa isa, const float* dy, const float* x, const float* mean,
                                   const float* rstd, float* dgamma, float* dbeta, int64_t rows, int64_t cols) {
  backward_weight(isa, dy, x, mean, rstd, dgamma, dbeta, rows, cols);
}

void layernorm_backward_weight_isa(VectorIsa isa, const std::uint16_t* dy, const std::uint16_t* x, const float* mean,
                                   const float* rstd, float* dgamma, float* dbeta, int64_t rows, int64_t cols) {
  backward_weight(isa, dy, x, mean, rstd, dgamma, dbeta, rows, cols);
}

void layernorm_backward_weight(const float* dy, const float* x, const float* mean, const float* rstd, float* dgamma,
                               float* dbeta, int64_t rows, int64_t cols) {
  backward_weight(best_vector_isa(), dy, x, mean, rstd, dgamma, dbeta, rows, cols);
}

void layernorm_backward_weight(const std::uint16_t* dy, const std::uint16_t* x, const float* mean, const float* rstd,
                               float* dgamma, float* dbeta, int64_t rows, int64_t cols) {
  backward_weight(best_vector_isa(), dy, x, mean, rstd, dgamma, dbeta, rows, cols);
}

}  // namespace cleave::kernels::cpu
