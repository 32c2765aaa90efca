// LayerNorm forward / backward. See layernorm.hpp. Rows are independent (parallel over rows); the weight
// gradient is a column reduction done by column blocks, each summing its rows in order (deterministic).
//
// The forward and input-gradient rows (issue 39 part 4, 2026-12-01) are written once over generic vectors as
// rmsnorm.cpp's: the `omp simd` loops they replace ran 4 lanes wide on the build's baseline x86-64. A row's sums
// (sum x, sum (x - mean)^2; sum g, sum g xhat) are kept as 16 lane sums whatever the vector width, the columns past the
// last full 16 added to their lanes one by one, then the 16 reduced in a fixed tree; every element-wise expression
// runs the same IEEE operations in the same order without contraction into FMA, so every path and thread count gives
// the same bits (KernelLayerNorm.EveryIsaPathAndThreadCountGivesTheSameBits).
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

using detail::broadcast;
using detail::load;
using detail::store;

constexpr int64_t kSumLanes = 16;  // a row sum's lane count, on every path

// The 16 lane sums reduced in a fixed tree: lane i += lane i + w for w = 8, 4, 2, 1.
[[gnu::always_inline]] inline float reduce_lanes(float* lane) {
  for (int64_t w = kSumLanes / 2; w >= 1; w /= 2) {
    for (int64_t i = 0; i < w; ++i) lane[i] += lane[i + w];
  }
  return lane[0];
}

// sum_c term(a[c], b[c]) as 16 lane sums: element c goes to lane c mod 16 in column order (those past the last
// full 16 one by one, the term computed on a splat), then the fixed tree. b may be a (the term ignores it).
template <class F, int64_t L, class Term>
[[gnu::always_inline]] inline float lane_sum(const float* a, const float* b, int64_t n, Term term) {
  constexpr int64_t K = kSumLanes / L;
  F acc[K];
  for (int64_t k = 0; k < K; ++k) acc[k] = F{};
  const int64_t full = n / kSumLanes * kSumLanes;
  for (int64_t c = 0; c < full; c += kSumLanes) {
    for (int64_t k = 0; k < K; ++k) acc[k] += term(load<F>(a + c + k * L), load<F>(b + c + k * L));
  }
  float lane[kSumLanes];
  for (int64_t k = 0; k < K; ++k) store(lane + k * L, acc[k]);
  for (int64_t c = full; c < n; ++c) lane[c - full] += term(broadcast<F>(a[c]), broadcast<F>(b[c]))[0];
  return reduce_lanes(lane);
}

// Two-pass variance (no cancellation for rows with a large mean), then y = (x - mean) * rstd * gamma + beta.
template <class F, int64_t L>
[[gnu::always_inline]] inline void forward_row(const float* xr, const float* gamma, const float* beta, float* yr,
                                               float* mean, float* rstd, int64_t cols, float eps) {
  const float mu = lane_sum<F, L>(xr, xr, cols, [](F x, F) { return x; }) / static_cast<float>(cols);
  const F muv = broadcast<F>(mu);
  const float sq = lane_sum<F, L>(xr, xr, cols, [muv](F x, F) { return (x - muv) * (x - muv); });
  const float rs = 1.0f / std::sqrt(sq / static_cast<float>(cols) + eps);
  const F rsv = broadcast<F>(rs);
  const int64_t full = cols / L * L;
  for (int64_t c = 0; c < full; c += L) {
    store(yr + c, (load<F>(xr + c) - muv) * rsv * load<F>(gamma + c) + load<F>(beta + c));
  }
  for (int64_t c = full; c < cols; ++c) {
    yr[c] = ((broadcast<F>(xr[c]) - muv) * rsv * broadcast<F>(gamma[c]) + broadcast<F>(beta[c]))[0];
  }
  *mean = mu;
  *rstd = rs;
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * gamma and xhat = (x - mean) * rstd; the two sums
// in one pass, each as 16 lane sums (lane_sum's order).
template <class F, int64_t L>
[[gnu::always_inline]] inline void backward_input_row(const float* dyr, const float* xr, const float* gamma, float mu,
                                                      float rs, float* dxr, int64_t cols) {
  constexpr int64_t K = kSumLanes / L;
  const F muv = broadcast<F>(mu), rsv = broadcast<F>(rs);
  F acc_g[K], acc_gx[K];
  for (int64_t k = 0; k < K; ++k) acc_g[k] = acc_gx[k] = F{};
  const int64_t full16 = cols / kSumLanes * kSumLanes;
  for (int64_t c = 0; c < full16; c += kSumLanes) {
    for (int64_t k = 0; k < K; ++k) {
      const int64_t i = c + k * L;
      const F g = load<F>(dyr + i) * load<F>(gamma + i);
      acc_g[k] += g;
      acc_gx[k] += g * (load<F>(xr + i) - muv) * rsv;
    }
  }
  float lane_g[kSumLanes], lane_gx[kSumLanes];
  for (int64_t k = 0; k < K; ++k) {
    store(lane_g + k * L, acc_g[k]);
    store(lane_gx + k * L, acc_gx[k]);
  }
  for (int64_t c = full16; c < cols; ++c) {
    const F g = broadcast<F>(dyr[c]) * broadcast<F>(gamma[c]);
    lane_g[c - full16] += g[0];
    lane_gx[c - full16] += (g * (broadcast<F>(xr[c]) - muv) * rsv)[0];
  }
  const F mean_g = broadcast<F>(reduce_lanes(lane_g) / static_cast<float>(cols));
  const F mean_gx = broadcast<F>(reduce_lanes(lane_gx) / static_cast<float>(cols));
  const int64_t full = cols / L * L;
  for (int64_t c = 0; c < full; c += L) {
    const F xhat = (load<F>(xr + c) - muv) * rsv;
    store(dxr + c, rsv * (load<F>(dyr + c) * load<F>(gamma + c) - mean_g - xhat * mean_gx));
  }
  for (int64_t c = full; c < cols; ++c) {
    const F xhat = (broadcast<F>(xr[c]) - muv) * rsv;
    dxr[c] = (rsv * (broadcast<F>(dyr[c]) * broadcast<F>(gamma[c]) - mean_g - xhat * mean_gx))[0];
  }
}

// The row loops are spelled out per path (a macro, not a template) because OpenMP outlines a parallel region into a
// function that takes the target of the function it is written in.
#define CLEAVE_LAYERNORM_ROW_PATHS(suffix, F, lanes, ...)                                                         \
  __VA_ARGS__ void forward_##suffix(const float* x, const float* gamma, const float* beta, float* y, float* mean, \
                                    float* rstd, int64_t rows, int64_t cols, float eps) {                         \
    CLEAVE_PARALLEL_FOR(r, rows, detail::worth_parallel(rows * cols),                                             \
      forward_row<F, lanes>(x + r * cols, gamma, beta, y + r * cols, mean + r, rstd + r, cols, eps);)             \
  }                                                                                                               \
  __VA_ARGS__ void backward_input_##suffix(const float* dy, const float* x, const float* gamma, const float* mean, \
                                           const float* rstd, float* dx, int64_t rows, int64_t cols) {            \
    CLEAVE_PARALLEL_FOR(r, rows, detail::worth_parallel(rows * cols),                                             \
      backward_input_row<F, lanes>(dy + r * cols, x + r * cols, gamma, mean[r], rstd[r], dx + r * cols, cols);)   \
  }

CLEAVE_LAYERNORM_ROW_PATHS(baseline, detail::f32xN, detail::kLanes, __attribute__((optimize("fp-contract=off"))))
#if defined(__x86_64__)
CLEAVE_LAYERNORM_ROW_PATHS(avx2, detail::f32x8, 8, __attribute__((target("avx2"), optimize("fp-contract=off"))))
CLEAVE_LAYERNORM_ROW_PATHS(avx512, detail::f32x16, 16,
                           __attribute__((target("avx512f"), optimize("fp-contract=off"))))
#endif
#undef CLEAVE_LAYERNORM_ROW_PATHS

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

void layernorm_forward_isa(VectorIsa isa, const float* x, const float* gamma, const float* beta, float* y,
                           float* mean, float* rstd, int64_t rows, int64_t cols, float eps) {
  CLEAVE_ASSERT(rows >= 0 && cols > 0, "layernorm_forward: bad shape [{}, {}]", rows, cols);
  CLEAVE_ASSERT(eps >= 0.0f, "layernorm_forward: negative eps {}", eps);
  isa_path(isa, "layernorm_forward", CLEAVE_ISA_PATHS(forward))(x, gamma, beta, y, mean, rstd, rows, cols, eps);
}

void layernorm_backward_input_isa(VectorIsa isa, const float* dy, const float* x, const float* gamma,
                                  const float* mean, const float* rstd, float* dx, int64_t rows, int64_t cols) {
  CLEAVE_ASSERT(rows >= 0 && cols > 0, "layernorm_backward_input: bad shape [{}, {}]", rows, cols);
  isa_path(isa, "layernorm_backward_input", CLEAVE_ISA_PATHS(backward_input))(dy, x, gamma, mean, rstd, dx, rows,
                                                                              cols);
}

void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                       int64_t rows, int64_t cols, float eps) {
  layernorm_forward_isa(best_vector_isa(), x, gamma, beta, y, mean, rstd, rows, cols, eps);
}

void layernorm_backward_input(const float* dy, const float* x, const float* gamma, const float* mean, const float* rstd,
                              float* dx, int64_t rows, int64_t cols) {
  layernorm_backward_input_isa(best_vector_isa(), dy, x, gamma, mean, rstd, dx, rows, cols);
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
