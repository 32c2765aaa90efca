// Element-wise helpers. See elementwise.hpp. sum_squares sums fixed-size chunks and then the chunk sums in
// order, so its result does not depend on the number of threads.
#include "kernels/cpu/elementwise.hpp"

#include <algorithm>
#include <vector>

#include "engine/core/error.hpp"
#include "kernels/cpu/parallel.hpp"

namespace cleave::kernels::cpu {

void add(const float* a, const float* b, float* out, int64_t n) {
  CLEAVE_ASSERT(n >= 0, "add: negative size {}", n);
  CLEAVE_PARALLEL_FOR_SIMD(i, n, detail::worth_parallel(n), out[i] = a[i] + b[i];)
}

void add_inplace(float* y, const float* x, int64_t n) {
  CLEAVE_ASSERT(n >= 0, "add_inplace: negative size {}", n);
  CLEAVE_PARALLEL_FOR_SIMD(i, n, detail::worth_parallel(n), y[i] += x[i];)
}

void scale_inplace(float* y, float alpha, int64_t n) {
  CLEAVE_ASSERT(n >= 0, "scale_inplace: negative size {}", n);
  CLEAVE_PARALLEL_FOR_SIMD(i, n, detail::worth_parallel(n), y[i] *= alpha;)
}

void axpy(float alpha, const float* x, float* y, int64_t n) {
  CLEAVE_ASSERT(n >= 0, "axpy: negative size {}", n);
  CLEAVE_PARALLEL_FOR_SIMD(i, n, detail::worth_parallel(n), y[i] += alpha * x[i];)
}

double sum_squares(const float* x, int64_t n) {
  CLEAVE_ASSERT(n >= 0, "sum_squares: negative size {}", n);
  constexpr int64_t kChunk = int64_t{1} << 16;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t begin = ch * kChunk;
    const int64_t end = std::min(n, begin + kChunk);
    double acc = 0.0;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = begin; i < end; ++i) acc += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    partial[static_cast<size_t>(ch)] = acc;
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace cleave::kernels::cpu
