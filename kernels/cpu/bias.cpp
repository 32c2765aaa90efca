// Bias forward (in place) and backward (column sums, accumulated). See bias.hpp.
//
// Why several paths (issue 39 part 4): the bias gradient of every Linear is a column sum over all of a micro-batch's
// rows, and as `omp simd` loops over a 256-column block it ran 4 lanes wide (the build's baseline x86-64) with its
// accumulators in memory, one block per team member: a 256-column gradient (the attention projection's, the MLP's
// output) ran on one thread while the others waited (1.4% of the small peer GPT's fp32 samples). The bodies are
// written once over generic vectors (as rmsnorm.cpp's): the baseline path, AVX2 (8 lanes) and AVX-512 (16 lanes),
// chosen at run time; a block is 64 columns, held in registers over the rows. The blocks share a team only from 2M
// elements (detail::worth_parallel_columns): below that a team's wake-up under passive waiting cost more than it saved
// (the small GPT's gradients, 256-1024 columns by 1024 rows, run on the calling thread). Each column is still summed
// over its rows in row order from +0, and the forward adds one element to one element, so every path, block width and
// thread count gives the same bits as the serial row-order loop (KernelBias.EveryIsaPathGivesTheRowOrderBits,
// KernelBias.TeamSharedBlocksGiveTheRowOrderBitsOverManyBinades).
#include "kernels/cpu/bias.hpp"

// Wide vectors never cross a call boundary here (the helpers are always_inline), so the ABI note GCC emits for
// 32- and 64-byte vector arguments without AVX does not apply (before vec_math.hpp, where it is reported).
#pragma GCC diagnostic ignored "-Wpsabi"

#include <algorithm>

#include "engine/core/error.hpp"
#include "kernels/cpu/bf16_vectors.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/vec_math.hpp"
#include "kernels/cpu/wide_vectors.hpp"

namespace cleave::kernels::cpu {

namespace {

using detail::f32x16;
using detail::f32x8;
using detail::load;
using detail::store;

constexpr int64_t kBlock = 64;  // columns per block of the bias gradient (4 AVX-512 vectors)

template <class F, int64_t L>
[[gnu::always_inline]] inline void add_bias_row(float* row, const float* bias, int64_t cols) {
  const int64_t full = cols / L * L;
  for (int64_t c = 0; c < full; c += L) store(row + c, load<F>(row + c) + load<F>(bias + c));
  for (int64_t c = full; c < cols; ++c) row[c] += bias[c];
}

// Columns [c0, c0 + kBlock) of the bias gradient, every row summed in row order from +0 (bf16 elements widened as
// they are loaded: the same f32 sums as over a widened copy of dy). A full block keeps its sums in registers; the
// last, narrower one sums column by column.
template <class F, int64_t L, class T>
[[gnu::always_inline]] inline void backward_block(const T* dy, float* dbias, int64_t rows, int64_t cols, int64_t c0) {
  const int64_t width = std::min(kBlock, cols - c0);
  float sums[kBlock] = {};
  if (width == kBlock) {
    constexpr int64_t K = kBlock / L;
    F acc[K];
    for (int64_t k = 0; k < K; ++k) acc[k] = F{};
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = dy + r * cols + c0;
      for (int64_t k = 0; k < K; ++k) acc[k] += detail::load_as_f32<F>(row + k * L);
    }
    for (int64_t k = 0; k < K; ++k) store(sums + k * L, acc[k]);
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = dy + r * cols + c0;
      for (int64_t c = 0; c < width; ++c) sums[c] += detail::to_f32(row[c]);
    }
  }
  for (int64_t c = 0; c < width; ++c) dbias[c0 + c] += sums[c];
}

// The loops are spelled out per path (a macro, not a template) because OpenMP outlines a parallel region into a
// function that takes the target of the function it is written in. Each block of the gradient belongs to one
// thread, which sums every row of it in order: deterministic, no atomics.
#define CLEAVE_BIAS_PATHS(suffix, F, lanes, ...)                                                                 \
  __VA_ARGS__ void forward_##suffix(float* y, const float* bias, int64_t rows, int64_t cols) {                    \
    CLEAVE_PARALLEL_FOR(r, rows, detail::worth_parallel(rows * cols),                                            \
                        add_bias_row<F, lanes>(y + r * cols, bias, cols);)                                       \
  }                                                                                                              \
  template <class T>                                                                                             \
  __VA_ARGS__ void backward_##suffix(const T* dy, float* dbias, int64_t rows, int64_t cols) {                    \
    const int64_t blocks = (cols + kBlock - 1) / kBlock;                                                         \
    CLEAVE_PARALLEL_FOR(blk, blocks, blocks > 1 && detail::worth_parallel_columns(rows * cols),                  \
                        backward_block<F, lanes>(dy, dbias, rows, cols, blk * kBlock);)                          \
  }

CLEAVE_BIAS_PATHS(baseline, detail::f32xN, detail::kLanes, __attribute__((optimize("fp-contract=off"))))
#if defined(__x86_64__)
CLEAVE_BIAS_PATHS(avx2, f32x8, 8, __attribute__((target("avx2"), optimize("fp-contract=off"))))
CLEAVE_BIAS_PATHS(avx512, f32x16, 16, __attribute__((target("avx512f"), optimize("fp-contract=off"))))
#endif
#undef CLEAVE_BIAS_PATHS

template <class T>
using BackwardFn = void(const T*, float*, int64_t, int64_t);

template <class T>
void backward(VectorIsa isa, const T* dy, float* dbias, int64_t rows, int64_t cols) {
  CLEAVE_ASSERT(rows >= 0 && cols >= 0, "bias_backward: negative shape [{}, {}]", rows, cols);
  isa_path<BackwardFn<T>>(isa, "bias_backward", CLEAVE_ISA_PATHS(backward))(dy, dbias, rows, cols);
}

}  // namespace

void bias_add_forward_isa(VectorIsa isa, float* y, const float* bias, int64_t rows, int64_t cols) {
  CLEAVE_ASSERT(rows >= 0 && cols >= 0, "bias_add_forward: negative shape [{}, {}]", rows, cols);
  isa_path(isa, "bias_add_forward", CLEAVE_ISA_PATHS(forward))(y, bias, rows, cols);
}

void bias_backward_isa(VectorIsa isa, const float* dy, float* dbias, int64_t rows, int64_t cols) {
  backward(isa, dy, dbias, rows, cols);
}

void bias_backward_isa(VectorIsa isa, const std::uint16_t* dy, float* dbias, int64_t rows, int64_t cols) {
  backward(isa, dy, dbias, rows, cols);
}

void bias_add_forward(float* y, const float* bias, int64_t rows, int64_t cols) {
  bias_add_forward_isa(best_vector_isa(), y, bias, rows, cols);
}

void bias_backward(const float* dy, float* dbias, int64_t rows, int64_t cols) {
  bias_backward_isa(best_vector_isa(), dy, dbias, rows, cols);
}

void bias_backward(const std::uint16_t* dy, float* dbias, int64_t rows, int64_t cols) {
  bias_backward_isa(best_vector_isa(), dy, dbias, rows, cols);
}

}  // namespace cleave::kernels::cpu
