// RMSNorm forward / backward. See rmsnorm.hpp. Rows are independent (parallel over rows); the weight
// gradient is a column reduction done by column blocks, each summing its rows in order (deterministic).
//
// Why vectorised, and why several paths (issue 39 part 4): the three RMSNorm passes are a Llama block's
// row-wise kernels; written as `omp simd` loops they ran 4 lanes wide on the build's baseline x86-64. The bodies
// are written once over generic vectors, like swiglu.cpp: the baseline path (the build's own vectors), AVX2 (8
// lanes) and AVX-512 (16 lanes), chosen at run time. A row's sums (sum x^2, sum dy w x) are kept as 16 lane sums
// whatever the vector width (one 16-lane vector, two of 8, four of 4), the columns past the last full 16 added
// to their lanes one by one, then the 16 reduced in a fixed tree; every element-wise expression runs the same
// IEEE operations in the same order without contraction into FMA (fp-contract=off). So every path gives the same
// bits (KernelRmsNorm.EveryIsaPathGivesTheSameBits), and the thread count never changes a result. The weight
// gradient's column blocks share a team only from 1M elements (detail::worth_parallel_columns, 2 operations an
// element; KernelRmsNormWeight.PathsAndThreadCountsGiveTheRowOrderBitsOverManyBinades).
//
// The residual forms (add_rmsnorm_*, a pre-norm block's x1 = x + attn; norm(x1)) run the same row bodies: the sum
// is written and read back per row (still in L1) and the input gradient's residual is added in the register
// before the one store, so their bits are the unfused pair's (KernelAddRmsNorm.*).
#include "kernels/cpu/rmsnorm.hpp"

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
using detail::f32x16;
using detail::f32x8;
using detail::load;
using detail::load_as_f32;
using detail::store;

constexpr int64_t kSumLanes = 16;   // a row sum's lane count, on every path
constexpr int64_t kWeightBlock = 128;  // columns per block of the weight gradient

// The 16 lane sums reduced in a fixed tree: lane i += lane i + w for w = 8, 4, 2, 1.
[[gnu::always_inline]] inline float reduce_lanes(float* lane) {
  for (int64_t w = kSumLanes / 2; w >= 1; w /= 2) {
    for (int64_t i = 0; i < w; ++i) lane[i] += lane[i + w];
  }
  return lane[0];
}

// sum_c a[c] * b[c] (b == a: sum of squares), or sum_c (a[c] * w[c]) * b[c] when kWeighted, as 16 lane sums.
template <class F, int64_t L, bool kWeighted>
[[gnu::always_inline]] inline float lane_dot(const float* a, const float* w, const float* b, int64_t n) {
  constexpr int64_t K = kSumLanes / L;
  F acc[K];
  for (int64_t k = 0; k < K; ++k) acc[k] = F{};
  const int64_t full = n / kSumLanes * kSumLanes;
  for (int64_t c = 0; c < full; c += kSumLanes) {
    for (int64_t k = 0; k < K; ++k) {
      const int64_t i = c + k * L;
      const F aw = kWeighted ? load<F>(a + i) * load<F>(w + i) : load<F>(a + i);
      acc[k] += aw * load<F>(b + i);
    }
  }
  float lane[kSumLanes];
  for (int64_t k = 0; k < K; ++k) store(lane + k * L, acc[k]);
  for (int64_t c = full; c < n; ++c) {
    const float aw = kWeighted ? a[c] * w[c] : a[c];
    lane[c - full] += aw * b[c];
  }
  return reduce_lanes(lane);
}

template <class F, int64_t L>
[[gnu::always_inline]] inline void forward_row(const float* x, const float* weight, float* y, float* rstd,
                                               int64_t cols, float eps) {
  const float sq = lane_dot<F, L, false>(x, nullptr, x, cols);
  const float rs = 1.0f / std::sqrt(sq / static_cast<float>(cols) + eps);
  const F rsv = broadcast<F>(rs);
  const int64_t full = cols / L * L;
  for (int64_t c = 0; c < full; c += L) store(y + c, load<F>(x + c) * rsv * load<F>(weight + c));
  for (int64_t c = full; c < cols; ++c) y[c] = (broadcast<F>(x[c]) * rsv * broadcast<F>(weight[c]))[0];
  *rstd = rs;
}

// The residual form (add_rmsnorm_forward): r = x + y written first, then the row normalised from r as stored, so
// the sums are those of rmsnorm_forward over r, bit for bit. r may alias x or y (element c is read, then written).
template <class F, int64_t L>
[[gnu::always_inline]] inline void add_forward_row(const float* x, const float* y, const float* weight, float* r,
                                                   float* out, float* rstd, int64_t cols, float eps) {
  const int64_t full = cols / L * L;
  for (int64_t c = 0; c < full; c += L) store(r + c, load<F>(x + c) + load<F>(y + c));
  for (int64_t c = full; c < cols; ++c) r[c] = x[c] + y[c];
  forward_row<F, L>(r, weight, out, rstd, cols, eps);
}

// kResidual: dx = (the plain dx, rounded to f32 as rmsnorm_backward_input stores it) + dres[c], which is what
// rmsnorm_backward_input followed by add_inplace(dx, dres) computes. dx may alias dres.
template <class F, int64_t L, bool kResidual = false>
[[gnu::always_inline]] inline void backward_input_row(const float* dy, const float* x, const float* weight, float rs,
                                                      float* dx, int64_t cols, const float* dres = nullptr) {
  const float dot = lane_dot<F, L, true>(dy, weight, x, cols);  // sum_c (dy w) x
  const float k = rs * rs * rs * dot / static_cast<float>(cols);
  const F rsv = broadcast<F>(rs), kv = broadcast<F>(k);
  const int64_t full = cols / L * L;
  for (int64_t c = 0; c < full; c += L) {
    const F v = rsv * load<F>(dy + c) * load<F>(weight + c) - kv * load<F>(x + c);
    if constexpr (kResidual) {
      store(dx + c, v + load<F>(dres + c));
    } else {
      store(dx + c, v);
    }
  }
  for (int64_t c = full; c < cols; ++c) {
    const F v = rsv * broadcast<F>(dy[c]) * broadcast<F>(weight[c]) - kv * broadcast<F>(x[c]);
    if constexpr (kResidual) {
      dx[c] = (v + broadcast<F>(dres[c]))[0];
    } else {
      dx[c] = v[0];
    }
  }
}

// acc[0, width) += (dy * x) * rs over the block's rows, in row order (T: float, or uint16_t for bf16 bits widened as
// they are loaded: the same f32 sums as over widened copies of dy and x).
template <class F, int64_t L, class T>
[[gnu::always_inline]] inline void backward_weight_block(const T* dy, const T* x, const float* rstd, float* dweight,
                                                         int64_t rows, int64_t cols, int64_t c0) {
  const int64_t width = std::min(kWeightBlock, cols - c0);
  const int64_t full = width / L * L;
  float acc[kWeightBlock] = {};
  for (int64_t r = 0; r < rows; ++r) {
    const T* dyr = dy + r * cols + c0;
    const T* xr = x + r * cols + c0;
    const F rsv = broadcast<F>(rstd[r]);
    for (int64_t c = 0; c < full; c += L) {
      store(acc + c, load<F>(acc + c) + load_as_f32<F>(dyr + c) * load_as_f32<F>(xr + c) * rsv);
    }
    for (int64_t c = full; c < width; ++c) {
      acc[c] = (broadcast<F>(acc[c]) + broadcast<F>(detail::to_f32(dyr[c])) * broadcast<F>(detail::to_f32(xr[c])) *
                                           rsv)[0];
    }
  }
  for (int64_t c = 0; c < width; ++c) dweight[c0 + c] += acc[c];
}

// The loops are spelled out per path (a macro, not a template) because OpenMP outlines a parallel region into a
// function that takes the target of the function it is written in.
#define CLEAVE_RMSNORM_PATHS(suffix, F, lanes, ...)                                                             \
  __VA_ARGS__ void forward_##suffix(const float* x, const float* weight, float* y, float* rstd, int64_t rows,    \
                                    int64_t cols, float eps) {                                                   \
    CLEAVE_PARALLEL_FOR(r, rows, detail::worth_parallel(rows * cols),                                            \
      forward_row<F, lanes>(x + r * cols, weight, y + r * cols, rstd + r, cols, eps);)                           \
  }                                                                                                              \
  __VA_ARGS__ void backward_input_##suffix(const float* dy, const float* x, const float* weight,                 \
                                           const float* rstd, float* dx, int64_t rows, int64_t cols) {           \
    CLEAVE_PARALLEL_FOR(r, rows, detail::worth_parallel(rows * cols),                                            \
      backward_input_row<F, lanes>(dy + r * cols, x + r * cols, weight, rstd[r], dx + r * cols, cols);)          \
  }                                                                                                              \
  __VA_ARGS__ void add_forward_##suffix(const float* x, const float* y, const float* weight, float* r, float* out,  \
                                        float* rstd, int64_t rows, int64_t cols, float eps) {                    \
    CLEAVE_PARALLEL_FOR(i, rows, detail::worth_parallel(rows * cols),                                            \
      add_forward_row<F, lanes>(x + i * cols, y + i * cols, weight, r + i * cols, out + i * cols, rstd + i, cols,  \
                                eps);)                                                                           \
  }                                                                                                              \
  __VA_ARGS__ void add_backward_input_##suffix(const float* dy, const float* dres, const float* x,              \
                                               const float* weight, const float* rstd, float* dx, int64_t rows,  \
                                               int64_t cols) {                                                   \
    CLEAVE_PARALLEL_FOR(i, rows, detail::worth_parallel(rows * cols),                                            \
      backward_input_row<F, lanes, true>(dy + i * cols, x + i * cols, weight, rstd[i], dx + i * cols, cols,      \
                                         dres + i * cols);)                                                      \
  }                                                                                                              \
  template <class T>                                                                                             \
  __VA_ARGS__ void backward_weight_##suffix(const T* dy, const T* x, const float* rstd, float* dweight,          \
                                            int64_t rows, int64_t cols) {                                        \
    const int64_t blocks = (cols + kWeightBlock - 1) / kWeightBlock;                                             \
    CLEAVE_PARALLEL_FOR(blk, blocks, blocks > 1 && detail::worth_parallel_columns(2 * rows * cols),              \
      backward_weight_block<F, lanes>(dy, x, rstd, dweight, rows, cols, blk * kWeightBlock);)                    \
  }

CLEAVE_RMSNORM_PATHS(baseline, detail::f32xN, detail::kLanes, __attribute__((optimize("fp-contract=off"))))
#if defined(__x86_64__)
CLEAVE_RMSNORM_PATHS(avx2, f32x8, 8, __attribute__((target("avx2"), optimize("fp-contract=off"))))
CLEAVE_RMSNORM_PATHS(avx512, f32x16, 16, __attribute__((target("avx512f"), optimize("fp-contract=off"))))
#endif
#undef CLEAVE_RMSNORM_PATHS

template <class T>
using BackwardWeightFn = void(const T*, const T*, const float*, float*, int64_t, int64_t);

template <class T>
void backward_weight(VectorIsa isa, const T* dy, const T* x, const float* rstd, float* dweight, int64_t rows,
                     int64_t cols) {
  CLEAVE_ASSERT(rows >= 0 && cols > 0, "rmsnorm_backward_weight: bad shape [{}, {}]", rows, cols);
  isa_path<BackwardWeightFn<T>>(isa, "rmsnorm_backward_weight", CLEAVE_ISA_PATHS(backward_weight))(dy, x, rstd,
                                                                                                   dweight, rows, cols);
}

}  // namespace

void rmsnorm_forward_isa(VectorIsa isa, const float* x, const float* weight, float* y, float* rstd, int64_t rows,
                         int64_t cols, float eps) {
  CLEAVE_ASSERT(rows >= 0 && cols > 0, "rmsnorm_forward: bad shape [{}, {}]", rows, cols);
  CLEAVE_ASSERT(eps > 0.0f, "rmsnorm_forward: eps must be > 0, got {}", eps);
  isa_path(isa, "rmsnorm_forward", CLEAVE_ISA_PATHS(forward))(x, weight, y, rstd, rows, cols, eps);
}

void rmsnorm_backward_input_isa(VectorIsa isa, const float* dy, const float* x, const float* weight,
                                const float* rstd, float* dx, int64_t rows, int64_t cols) {
  CLEAVE_ASSERT(rows >= 0 && cols > 0, "rmsnorm_backward_input: bad shape [{}, {}]", rows, cols);
  isa_path(isa, "rmsnorm_backward_input", CLEAVE_ISA_PATHS(backward_input))(dy, x, weight, rstd, dx, rows, cols);
}

void rmsnorm_backward_weight_isa(VectorIsa isa, const float* dy, const float* x, const float* rstd, float* dweight,
                                 int64_t rows, int64_t cols) {
  backward_weight(isa, dy, x, rstd, dweight, rows, cols);
}

void rmsnorm_backward_weight_isa(VectorIsa isa, const std::uint16_t* dy, const std::uint16_t* x, const float* rstd,
                                 float* dweight, int64_t rows, int64_t cols) {
  backward_weight(isa, dy, x, rstd, dweight, rows, cols);
}

void add_rmsnorm_forward_isa(VectorIsa isa, const float* x, const float* y, const float* weight, float* r,
                             float* out, float* rstd, int64_t rows, int64_t cols, float eps) {
  CLEAVE_ASSERT(rows >= 0 && cols > 0, "add_rmsnorm_forward: bad shape [{}, {}]", rows, cols);
  CLEAVE_ASSERT(eps > 0.0f, "add_rmsnorm_forward: eps must be > 0, got {}", eps);
  isa_path(isa, "add_rmsnorm_forward", CLEAVE_ISA_PATHS(add_forward))(x, y, weight, r, out, rstd, rows, cols, eps);
}

void add_rmsnorm_backward_input_isa(VectorIsa isa, const float* dy, const float* dres, const float* x,
                                    const float* weight, const float* rstd, float* dx, int64_t rows, int64_t cols) {
  CLEAVE_ASSERT(rows >= 0 && cols > 0, "add_rmsnorm_backward_input: bad shape [{}, {}]", rows, cols);
  isa_path(isa, "add_rmsnorm_backward_input", CLEAVE_ISA_PATHS(add_backward_input))(dy, dres, x, weight, rstd, dx, rows, cols);
}

void add_rmsnorm_forward(const float* x, const float* y, const float* weight, float* r, float* out, float* rstd,
                         int64_t rows, int64_t cols, float eps) {
  add_rmsnorm_forward_isa(best_vector_isa(), x, y, weight, r, out, rstd, rows, cols, eps);
}

void add_rmsnorm_backward_input(const float* dy, const float* dres, const float* x, const float* weight,
                                const float* rstd, float* dx, int64_t rows, int64_t cols) {
  add_rmsnorm_backward_input_isa(best_vector_isa(), dy, dres, x, weight, rstd, dx, rows, cols);
}

void rmsnorm_forward(const float* x, const float* weight, float* y, float* rstd, int64_t rows, int64_t cols,
                     float eps) {
  rmsnorm_forward_isa(best_vector_isa(), x, weight, y, rstd, rows, cols, eps);
}

void rmsnorm_backward_input(const float* dy, const float* x, const float* weight, const float* rstd, float* dx,
                            int64_t rows, int64_t cols) {
  rmsnorm_backward_input_isa(best_vector_isa(), dy, x, weight, rstd, dx, rows, cols);
}

void rmsnorm_backward_weight(const float* dy, const float* x, const float* rstd, float* dweight, int64_t rows,
                             int64_t cols) {
  rmsnorm_backward_weight_isa(best_vector_isa(), dy, x, rstd, dweight, rows, cols);
}

void rmsnorm_backward_weight(const std::uint16_t* dy, const std::uint16_t* x, const float* rstd, float* dweight,
                             int64_t rows, int64_t cols) {
  rmsnorm_backward_weight_isa(best_vector_isa(), dy, x, rstd, dweight, rows, cols);
}

}  // namespace cleave::kernels::cpu
