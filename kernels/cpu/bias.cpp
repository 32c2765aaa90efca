// Bias forward (in place) and backward (column sums, accumulated). See bias.hpp.
#include "kernels/cpu/bias.hpp"

#include <algorithm>

#include "engine/core/error.hpp"
#include "kernels/cpu/bf16_vectors.hpp"
#include "kernels/cpu/parallel.hpp"

namespace cleave::kernels::cpu {

namespace {

[[gnu::noinline]] void add_bias_row(float* row, const float* bias, int64_t cols) {
#pragma omp simd
  for (int64_t c = 0; c < cols; ++c) row[c] += bias[c];
}

constexpr int64_t kBlock = 256;  // columns per block of the bias gradient

// Columns [c0, c0 + kBlock) of the bias gradient, every row summed in row order (bf16 elements widened as they are
// loaded: the same f32 sums as over a widened copy of dy).
template <class T>
[[gnu::noinline]] void backward_block(const T* dy, float* dbias, int64_t rows, int64_t cols, int64_t c0) {
  const int64_t width = std::min(kBlock, cols - c0);
  float acc[kBlock] = {};
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = dy + r * cols + c0;
#pragma omp simd
    for (int64_t c = 0; c < width; ++c) acc[c] += detail::to_f32(row[c]);
  }
  for (int64_t c = 0; c < width; ++c) dbias[c0 + c] += acc[c];
}

// Each thread owns a block of columns and sums every row of it in order: deterministic, no atomics.
template <class T>
void backward(const T* dy, float* dbias, int64_t rows, int64_t cols) {
  CLEAVE_ASSERT(rows >= 0 && cols >= 0, "bias_backward: negative shape [{}, {}]", rows, cols);
  const int64_t blocks = (cols + kBlock - 1) / kBlock;
  CLEAVE_PARALLEL_FOR(blk, blocks, blocks > 1 && detail::worth_parallel(rows * cols),
                      backward_block(dy, dbias, rows, cols, blk * kBlock);)
}

}  // namespace

void bias_add_forward(float* y, const float* bias, int64_t rows, int64_t cols) {
  CLEAVE_ASSERT(rows >= 0 && cols >= 0, "bias_add_forward: negative shape [{}, {}]", rows, cols);
  CLEAVE_PARALLEL_FOR(r, rows, detail::worth_parallel(rows * cols), add_bias_row(y + r * cols, bias, cols);)
}

void bias_backward(const float* dy, float* dbias, int64_t rows, int64_t cols) { backward(dy, dbias, rows, cols); }

void bias_backward(const std::uint16_t* dy, float* dbias, int64_t rows, int64_t cols) {
  backward(dy, dbias, rows, cols);
}

}  // namespace cleave::kernels::cpu
