// Row-major GEMM over cblas_sgemm. See gemm.hpp for the contract.
//
// Threading: when OpenBLAS is set to one thread and OpenMP to several (configure_kernel_threads), a large
// GEMM is cut into one slice of C per OpenMP thread, each computed by a single-threaded sgemm. Then every
// CPU kernel runs on the one OpenMP team: OpenBLAS's own pool and OpenMP's spin-waiting workers never fight
// over the cores (measured on 2 cores: a GEMM followed by an OpenMP GELU took 1.8-4.3 ms longer than the
// two apart with both pools active; 137-158 GFLOP/s sliced against 58-98 for OpenBLAS threads on the MLP
// shapes in that alternation). Otherwise OpenBLAS threads the call itself.
// Deterministic mode (GemmSlicing::kShapeFixed): slices of a fixed width, whatever the thread count,
// because OpenBLAS's bits depend on the slice shapes.
#include "kernels/cpu/gemm.hpp"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <limits>

#include "engine/core/error.hpp"

namespace cleave::kernels::cpu {
namespace {

// OpenBLAS runs a GEMM on the calling thread alone when m*n*k is at most 65536 * 4 (interface/gemm.c,
// SMP_THRESHOLD_MIN * GEMM_MULTITHREAD_THRESHOLD). Batches of such small GEMMs are spread over OpenMP
// threads instead; larger ones run one after another, each threaded as a single GEMM is.
constexpr double kOpenBlasSingleThreadMnk = 65536.0 * 4.0;
// Below this m*n*k a sliced GEMM is not worth an OpenMP fork/join (about 2 MFLOP, ~25 us on one core).
constexpr double kSliceMinMnk = 1048576.0;
// Slices of C start on multiples of this many columns (one 64-byte line of floats) or rows.
constexpr int64_t kSliceAlign = 16;
// Deterministic mode: slice width (columns or rows), a multiple of kSliceAlign.
constexpr int64_t kInvariantSlice = 64;

void check_gemm(const char* op, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                int64_t ldc) {
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  CLEAVE_ASSERT(m >= 0 && n >= 0 && k >= 0, "{}: negative size m={} n={} k={}", op, m, n, k);
  CLEAVE_ASSERT(m <= kMax && n <= kMax && k <= kMax && lda <= kMax && ldb <= kMax && ldc <= kMax,
                "{}: size exceeds the 32-bit BLAS interface (m={} n={} k={} lda={} ldb={} ldc={})", op, m, n, k, lda,
                ldb, ldc);
  const int64_t min_lda = trans_a ? m : k;  // columns of A as stored
  const int64_t min_ldb = trans_b ? k : n;
  CLEAVE_ASSERT(lda >= 1 && lda >= min_lda, "{}: lda={} < {} (trans_a={}, m={}, k={})", op, lda, min_lda, trans_a, m,
                k);
  CLEAVE_ASSERT(ldb >= 1 && ldb >= min_ldb, "{}: ldb={} < {} (trans_b={}, k={}, n={})", op, ldb, min_ldb, trans_b, k,
                n);
  CLEAVE_ASSERT(ldc >= 1 && ldc >= n, "{}: ldc={} < n={}", op, ldc, n);
}

// C = beta * C over an m x n block (BLAS semantics: beta == 0 writes zeros without reading C).
void scale_c(int64_t m, int64_t n, float beta, float* c, int64_t ldc) {
  if (beta == 1.0f) return;
  for (int64_t i = 0; i < m; ++i) {
    float* row = c + i * ldc;
    if (beta == 0.0f) {
      for (int64_t j = 0; j < n; ++j) row[j] = 0.0f;
    } else {
      for (int64_t j = 0; j < n; ++j) row[j] *= beta;
    }
  }
}

void gemm_unchecked(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                    int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    scale_c(m, n, beta, c, ldc);
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b,
              static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

// One slice of C as one sgemm.
void gemm_slice(const GemmSlice& slice, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const int64_t lo = slice.lo, hi = slice.hi;
  if (slice.split_n) {
    const float* b_slice = trans_b ? b + lo * ldb : b + lo;
    gemm_unchecked(trans_a, trans_b, m, hi - lo, k, alpha, a, lda, b_slice, ldb, beta, c + lo, ldc);
  } else {
    const float* a_slice = trans_a ? a + lo : a + lo * lda;
    gemm_unchecked(trans_a, trans_b, hi - lo, n, k, alpha, a_slice, lda, b, ldb, beta, c + lo * ldc, ldc);
  }
}

// One GEMM, its slices shared out over the OpenMP team when OpenBLAS is single-threaded (see the file
// comment). Must not be called from inside a parallel region (the batched path calls gemm_unchecked there).
void gemm_threaded(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                   int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc, GemmSlicing slicing) {
  // kPerThread slicing only pays when OpenBLAS itself is single-threaded and a team is free.
  const bool sliceable = slicing == GemmSlicing::kShapeFixed || (!omp_in_parallel() && openblas_get_num_threads() == 1);
  const int threads = sliceable ? omp_get_max_threads() : 1;
  const std::vector<GemmSlice> plan = gemm_slice_plan(slicing, m, n, k, threads);
  if (plan.size() == 1) {
    gemm_unchecked(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  const auto count = static_cast<int64_t>(plan.size());
  const bool team = omp_get_max_threads() > 1 && !omp_in_parallel();
  if (slicing == GemmSlicing::kShapeFixed) {
#pragma omp parallel for schedule(static) if (team)
    for (int64_t s = 0; s < count; ++s) gemm_slice(plan[s], trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
#pragma omp parallel for schedule(static, 1) num_threads(static_cast<int>(count))
  for (int64_t s = 0; s < count; ++s) gemm_slice(plan[s], trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace

std::vector<GemmSlice> gemm_slice_plan(GemmSlicing slicing, int64_t m, int64_t n, int64_t k, int threads) {
  const double mnk = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const bool split_n = n >= m;
  const int64_t extent = split_n ? n : m;
  const std::vector<GemmSlice> whole{GemmSlice{split_n, 0, extent}};
  std::vector<GemmSlice> plan;
  if (slicing == GemmSlicing::kShapeFixed) {
    // kInvariantSlice-wide pieces along C's longer side, by shape only: the same sgemm calls for any
    // thread count.
    if (k == 0 || mnk < kSliceMinMnk || extent < 2 * kInvariantSlice) return whole;
    for (int64_t lo = 0; lo < extent; lo += kInvariantSlice) {
      plan.push_back(GemmSlice{split_n, lo, std::min(extent, lo + kInvariantSlice)});
    }
    return plan;
  }
  // One slice per thread, aligned to kSliceAlign.
  if (threads <= 1 || k == 0 || mnk < kSliceMinMnk || extent < 2 * kSliceAlign) return whole;
  const int64_t slices = std::min<int64_t>(threads, extent / kSliceAlign);
  const int64_t chunk = ((extent + slices - 1) / slices + kSliceAlign - 1) / kSliceAlign * kSliceAlign;
  for (int64_t lo = 0; lo < extent; lo += chunk) plan.push_back(GemmSlice{split_n, lo, std::min(extent, lo + chunk)});
  return plan;
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc, GemmSlicing slicing) {
  check_gemm("gemm", trans_a, trans_b, m, n, k, lda, ldb, ldc);
  CLEAVE_ASSERT(m == 0 || n == 0 || c != nullptr, "gemm: null C for a {}x{} result", m, n);
  CLEAVE_ASSERT(m == 0 || n == 0 || k == 0 || (a != nullptr && b != nullptr), "gemm: null A or B");
  gemm_threaded(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, slicing);
}

void gemm_strided_batched(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                          int64_t lda, int64_t stride_a, const float* b, int64_t ldb, int64_t stride_b, float beta,
                          float* c, int64_t ldc, int64_t stride_c, int64_t batch, GemmSlicing slicing) {
  check_gemm("gemm_strided_batched", trans_a, trans_b, m, n, k, lda, ldb, ldc);
  CLEAVE_ASSERT(batch >= 0, "gemm_strided_batched: negative batch {}", batch);
  if (m == 0 || n == 0 || batch == 0) return;
  CLEAVE_ASSERT(c != nullptr && (k == 0 || (a != nullptr && b != nullptr)), "gemm_strided_batched: null pointer");
  const double mnk = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  // Tiny batches are not worth an OpenMP fork/join (a few microseconds).
  const bool spread = batch > 1 && mnk <= kOpenBlasSingleThreadMnk && mnk * static_cast<double>(batch) >= 32768.0;
  if (spread) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < batch; ++i) {
      gemm_unchecked(trans_a, trans_b, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b, ldb, beta,
                     c + i * stride_c, ldc);
    }
    return;
  }
  for (int64_t i = 0; i < batch; ++i) {
    gemm_threaded(trans_a, trans_b, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b, ldb, beta,
                  c + i * stride_c, ldc, slicing);
  }
}

}  // namespace cleave::kernels::cpu
