// Element-wise helpers. See elementwise.hpp. sum_squares sums fixed-size chunks and then the chunk sums in
// order, so its result does not depend on the number of threads.
#include "kernels/cpu/elementwise.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/core/error.hpp"
#include "kernels/cpu/multi_tensor.hpp"
#include "kernels/cpu/parallel.hpp"

namespace cleave::kernels::cpu {

void add(const float* a, const float* b, float* out, int64_t n) {
  CLEAVE_ASSERT(n >= 0, "add: negative size {}", n);
  CLEAVE_PARALLEL_FOR_SIMD(i, n, detail::worth_parallel_streaming(n), out[i] = a[i] + b[i];)
}

void add_inplace(float* y, const float* x, int64_t n) {
  CLEAVE_ASSERT(n >= 0, "add_inplace: negative size {}", n);
  CLEAVE_PARALLEL_FOR_SIMD(i, n, detail::worth_parallel_streaming(n), y[i] += x[i];)
}

void scale_inplace(float* y, float alpha, int64_t n) {
  CLEAVE_ASSERT(n >= 0, "scale_inplace: negative size {}", n);
  CLEAVE_PARALLEL_FOR_SIMD(i, n, detail::worth_parallel_streaming(n), y[i] *= alpha;)
}

namespace {

// One piece of scale_inplace_many: the single-tensor loop's arithmetic (one multiply per element).
[[gnu::noinline]] void scale_range(float* y, float alpha, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] *= alpha;
}

}  // namespace

void scale_inplace_many(const FloatSpan* ys, int64_t count, float alpha) {
  CLEAVE_ASSERT(count >= 0, "scale_inplace_many: negative tensor count {}", count);
  int64_t total = 0;
  for (int64_t t = 0; t < count; ++t) {
    CLEAVE_ASSERT(ys[t].n >= 0, "scale_inplace_many: tensor {} has negative size {}", t, ys[t].n);
    total += ys[t].n;
  }
  detail::for_each_piece(
      count, [&](int64_t t) { return ys[t].n; }, detail::worth_parallel(total),
      [&](int64_t t, int64_t begin, int64_t end) { scale_range(ys[t].data + begin, alpha, end - begin); });
}

void axpy(float alpha, const float* x, float* y, int64_t n) {
  CLEAVE_ASSERT(n >= 0, "axpy: negative size {}", n);
  CLEAVE_PARALLEL_FOR_SIMD(i, n, detail::worth_parallel_streaming(n), y[i] += alpha * x[i];)
}

namespace {

constexpr int64_t kSquaresChunk = int64_t{1} << 16;

// One chunk's sum of squares in double, compiled once (noinline) so both branches of CLEAVE_PARALLEL_FOR run the
// same vectorised reduction.
[[gnu::noinline]] double chunk_sum_squares(const float* x, int64_t n) {
  double acc = 0.0;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return acc;
}

}  // namespace

double sum_squares(const float* x, int64_t n) {
  CLEAVE_ASSERT(n >= 0, "sum_squares: negative size {}", n);
  const int64_t chunks = (n + kSquaresChunk - 1) / kSquaresChunk;
  // The chunks' sums are added in chunk order; they are kept on the stack a block of chunks at a time (no allocation).
  constexpr int64_t kBlock = 256;
  double partial[kBlock];
  double total = 0.0;
  for (int64_t first = 0; first < chunks; first += kBlock) {
    const int64_t block = std::min(kBlock, chunks - first);
    CLEAVE_PARALLEL_FOR(j, block, block > 1,
      const int64_t begin = (first + j) * kSquaresChunk;
      partial[j] = chunk_sum_squares(x + begin, std::min(n, begin + kSquaresChunk) - begin);)
    for (int64_t j = 0; j < block; ++j) total += partial[j];
  }
  return total;
}

namespace {

// One chunk of at most 2^16 elements: m² (< 2^48) summed per exponent field in uint64 buckets (no overflow for
// 2^16 terms), then each bucket folded into the digits at its scale. Four bucket sets, element i in set i % 4,
// keep consecutive elements of one exponent off a single store-to-load chain. Bucket 255 is non-zero only when
// the chunk holds a NaN or an infinity; those are then counted one by one.
constexpr int64_t kExactChunk = int64_t{1} << 16;
constexpr int kBucketSets = 4;

inline uint64_t mantissa_square(const float* x, uint32_t& e) {
  uint32_t u = 0;
  std::memcpy(&u, x, sizeof u);
  e = (u >> 23) & 0xffu;
  const uint64_t m = e != 0 ? ((u & 0x7fffffu) | 0x800000u) : (u & 0x7fffffu);
  return m * m;
}

void exact_chunk(const float* x, int64_t n, ExactSquareSum& acc) {
  uint64_t bucket[kBucketSets][256] = {};
  int64_t i = 0;
  for (; i + kBucketSets <= n; i += kBucketSets) {
    for (int k = 0; k < kBucketSets; ++k) {
      uint32_t e = 0;
      const uint64_t sq = mantissa_square(x + i + k, e);
      bucket[k][e] += sq;
    }
  }
  for (; i < n; ++i) {
    uint32_t e = 0;
    const uint64_t sq = mantissa_square(x + i, e);
    bucket[0][e] += sq;
  }
  for (int k = 0; k < kBucketSets; ++k) {
    for (uint32_t e = 0; e < 255; ++e) {
      if (bucket[k][e] != 0) acc.add_scaled(bucket[k][e], ExactSquareSum::square_shift(e));
    }
  }
  bool special = false;
  for (int k = 0; k < kBucketSets; ++k) special = special || bucket[k][255] != 0;
  if (special) {
    for (int64_t j = 0; j < n; ++j) {
      if (!std::isfinite(x[j])) acc.add_square(x[j]);
    }
  }
  acc.normalize();
}

}  // namespace

void sum_squares_exact(const float* x, int64_t n, ExactSquareSum& acc) {
  CLEAVE_ASSERT(n >= 0, "sum_squares_exact: negative size {}", n);
  const int64_t chunks = (n + kExactChunk - 1) / kExactChunk;
  if (chunks <= 1) {
    exact_chunk(x, n, acc);
    return;
  }
  if (omp_in_parallel()) {  // a nested region would have one thread: no team, the chunks in order here
    for (int64_t ch = 0; ch < chunks; ++ch) {
      const int64_t begin = ch * kExactChunk;
      exact_chunk(x + begin, std::min(n, begin + kExactChunk) - begin, acc);
    }
    acc.normalize();
    return;
  }
  // Each thread sums its chunks into its own accumulator; the merges are exact, so their order is free.
#pragma omp parallel
  {
    ExactSquareSum local;
#pragma omp for schedule(static)
    for (int64_t ch = 0; ch < chunks; ++ch) {
      const int64_t begin = ch * kExactChunk;
      exact_chunk(x + begin, std::min(n, begin + kExactChunk) - begin, local);
    }
#pragma omp critical(cleave_sum_squares_exact)
    acc.merge(local);
  }
  acc.normalize();
}

void sum_squares_exact_many(const ConstFloatSpan* xs, int64_t count, ExactSquareSum& acc) {
  CLEAVE_ASSERT(count >= 0, "sum_squares_exact_many: negative tensor count {}", count);
  for (int64_t t = 0; t < count; ++t) {
    CLEAVE_ASSERT(xs[t].n >= 0, "sum_squares_exact_many: tensor {} has negative size {}", t, xs[t].n);
  }
  // Pieces of at most one exact chunk (its bucket headroom).
  const auto size_of = [&](int64_t t) { return xs[t].n; };
  const int64_t piece_count = detail::piece_count(count, size_of, kExactChunk);
  auto run = [&](int64_t first, int64_t last, ExactSquareSum& into) {
    detail::walk_pieces(count, size_of, kExactChunk, first, last, [&](int64_t t, int64_t begin, int64_t end) {
      exact_chunk(xs[t].data + begin, end - begin, into);  // normalizes `into`
    });
  };
  if (!detail::parallel_here(piece_count > 1)) {  // one piece, or inside a region: the pieces in order here
    run(0, piece_count, acc);
    acc.normalize();
    return;
  }
  // As sum_squares_exact: each thread sums its run of pieces into its own accumulator; the merges are exact.
#pragma omp parallel
  {
    ExactSquareSum local;
    const int64_t threads = omp_get_num_threads(), thread = omp_get_thread_num();
    run(piece_count * thread / threads, piece_count * (thread + 1) / threads, local);
#pragma omp critical(cleave_sum_squares_exact)
    acc.merge(local);
  }
  acc.normalize();
}

}  // namespace cleave::kernels::cpu
