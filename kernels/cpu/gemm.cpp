// Row-major GEMM over the libraries of gemm_backend.hpp. See gemm.hpp for the contract.
//
// Threading: when OpenBLAS is set to one thread and OpenMP to several (configure_kernel_threads), a large
// GEMM is cut into one slice of C per OpenMP thread, each computed by a single-threaded library call. Then every
// CPU kernel runs on the one OpenMP team: OpenBLAS's own pool and OpenMP's spin-waiting workers never fight
// over the cores (measured on 2 cores: a GEMM followed by an OpenMP GELU took 1.8-4.3 ms longer than the
// two apart with both pools active; 137-158 GFLOP/s sliced against 58-98 for OpenBLAS threads on the MLP
// shapes in that alternation). Otherwise OpenBLAS threads the call itself. BLIS and oneDNN are always called
// single-threaded (gemm_kernels.hpp), so they are always sliced.
// Deterministic mode (GemmSlicing::kShapeFixed): slices of a fixed width, whatever the thread count,
// because a library's bits depend on the slice shapes.
#include "kernels/cpu/gemm.hpp"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <limits>
#include <type_traits>

#include "engine/core/error.hpp"
#include "kernels/cpu/cast.hpp"
#include "kernels/cpu/gemm_kernels.hpp"
#include "kernels/cpu/parallel.hpp"

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
// oneDNN's fastest matmul kernels (brgemm, in 2.6) take a plain (untransposed) A and a dense C; a column slice of
// C (ldc > n) runs its older gemm:jit kernels instead. Measured per call on the example GPT's bf16 shapes (2-vCPU
// Zen 4, DNNL_VERBOSE): a 512x512x128 forward with the bias as two row slices 0.76x the thread time of two
// column slices, the 512x512x128 input gradient 0.81x. Only bf16 operands take row slices: f32 was level
// (0.96-1.02x per call, whole steps within noise), so its slicing is OpenBLAS's; a transposed A (weight
// gradients) gains nothing from dense C slices and keeps the longer side (rows of a 128-row C were 1.11x).
constexpr SliceSide kOneDnnBf16Side = SliceSide::kRows;

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

void scale_c(int64_t m, int64_t n, float beta, std::uint16_t* c, int64_t ldc) {
  if (beta == 1.0f) return;
  constexpr int64_t kPiece = 256;  // widened on the stack a piece at a time: no allocation per call
  float piece[kPiece];
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; j += kPiece) {
      const int64_t len = std::min(kPiece, n - j);
      cast_bf16_to_f32_serial(c + i * ldc + j, piece, len);
      for (int64_t x = 0; x < len; ++x) piece[x] = beta == 0.0f ? 0.0f : piece[x] * beta;
      cast_f32_to_bf16_serial(piece, c + i * ldc + j, len);
    }
  }
}

// A library's single-threaded kernel (gemm_kernels.hpp) for In operands and an Out C: a stateless one (OpenBLAS,
// BLIS) or oneDNN's with the run's OneDnnMatmuls bound.
template <typename In, typename Out>
struct Kernel {
  using Plain = void (*)(bool, bool, int64_t, int64_t, int64_t, float, const In*, int64_t, const In*, int64_t, float,
                         Out*, int64_t);
  using WithMatmuls = void (*)(OneDnnMatmuls&, GemmShape, bool, bool, int64_t, int64_t, int64_t, float, const In*,
                               int64_t, const In*, int64_t, float, Out*, int64_t);
  Plain plain = nullptr;
  WithMatmuls onednn = nullptr;
  OneDnnMatmuls* matmuls = nullptr;  // set with `onednn`
  GemmShape shape = GemmShape::kExact;

  void operator()(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const In* a, int64_t lda,
                  const In* b, int64_t ldb, float beta, Out* c, int64_t ldc) const {
    if (onednn != nullptr) {
      onednn(*matmuls, shape, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    } else {
      plain(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    }
  }
};

// oneDNN's state, which a call on oneDNN cannot do without.
OneDnnMatmuls& onednn_matmuls(const char* op, GemmLibrary library) {
  CLEAVE_ASSERT(library.onednn != nullptr,
                "{}: the onednn library needs the run's OneDnnMatmuls (GemmLibrary::onednn; through the op seam, the "
                "CPU backend's resources carry it)",
                op);
  return *library.onednn;
}

// The f32 kernels and whether the library may thread a call itself (then it is not sliced in kPerThread mode).
struct F32Library {
  Kernel<float, float> kernel;
  bool threads_itself;
};

F32Library f32_library(const char* op, GemmLibrary library) {
  switch (library.backend) {
    case GemmBackend::kOpenBlas:
      return {{gemm_detail::sgemm_openblas}, openblas_get_num_threads() > 1};
    case GemmBackend::kBlis:
      return {{gemm_detail::sgemm_blis}, false};
    case GemmBackend::kOneDnn:
      return {{nullptr, gemm_detail::sgemm_onednn, &onednn_matmuls(op, library), library.shape}, false};
  }
  CLEAVE_ASSERT(false, "unknown GemmBackend {}", static_cast<int>(library.backend));
}

// C = bias in every row (the k == 0 product plus the bias, with beta 0).
void fill_bias(int64_t m, int64_t n, const float* bias, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) std::copy(bias, bias + n, c + i * ldc);
}
void fill_bias(int64_t m, int64_t n, const float* bias, std::uint16_t* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) cast_f32_to_bf16(bias, c + i * ldc, n);
}

// `bias` (n floats or null; only with bf16 operands, alpha 1 and beta 0) runs the library's bias-epilogue kernel.
template <typename In, typename Out>
void gemm_unchecked(Kernel<In, Out> kernel, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const In* a, int64_t lda, const In* b, int64_t ldb, float beta, Out* c, int64_t ldc,
                    const float* bias = nullptr) {
  if (m == 0 || n == 0) return;
  if (bias != nullptr) {
    if (k == 0) return fill_bias(m, n, bias, c, ldc);
    if constexpr (std::is_same_v<In, std::uint16_t> && std::is_same_v<Out, float>) {
      gemm_detail::bf16gemm_onednn_f32_bias(*kernel.matmuls, kernel.shape, trans_a, trans_b, m, n, k, a, lda, b, ldb,
                                            bias, c, ldc);
    } else if constexpr (std::is_same_v<In, std::uint16_t> && std::is_same_v<Out, std::uint16_t>) {
      gemm_detail::bf16gemm_onednn_bf16_bias(*kernel.matmuls, kernel.shape, trans_a, trans_b, m, n, k, a, lda, b,
                                             ldb, bias, c, ldc);
    } else {
      CLEAVE_ASSERT(false, "gemm: a bias epilogue needs bf16 operands");
    }
    return;
  }
  if (k == 0) {
    scale_c(m, n, beta, c, ldc);
    return;
  }
  kernel(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// One slice of C as one library call.
template <typename In, typename Out>
void gemm_slice(Kernel<In, Out> kernel, const GemmSlice& slice, bool trans_a, bool trans_b, int64_t m, int64_t n,
                int64_t k, float alpha, const In* a, int64_t lda, const In* b, int64_t ldb, float beta, Out* c,
                int64_t ldc, const float* bias) {
  const int64_t lo = slice.lo, hi = slice.hi;
  if (slice.split_n) {
    const In* b_slice = trans_b ? b + lo * ldb : b + lo;
    gemm_unchecked(kernel, trans_a, trans_b, m, hi - lo, k, alpha, a, lda, b_slice, ldb, beta, c + lo, ldc,
                   bias != nullptr ? bias + lo : nullptr);
  } else {
    const In* a_slice = trans_a ? a + lo : a + lo * lda;
    gemm_unchecked(kernel, trans_a, trans_b, hi - lo, n, k, alpha, a_slice, lda, b, ldb, beta, c + lo * ldc, ldc,
                   bias);
  }
}

// One GEMM, its slices shared out over the OpenMP team unless the library threads the call itself (see the
// file comment). Inside a parallel region (the batched path) it runs on the calling thread.
template <typename In, typename Out>
void gemm_threaded(Kernel<In, Out> kernel, bool threads_itself, SliceSide side, bool trans_a, bool trans_b, int64_t m,
                   int64_t n, int64_t k, float alpha, const In* a, int64_t lda, const In* b, int64_t ldb, float beta,
                   Out* c, int64_t ldc, GemmSlicing slicing, const float* bias = nullptr) {
  // kPerThread slicing only pays when the library is single-threaded and a team is free.
  const bool sliceable = slicing == GemmSlicing::kShapeFixed || (!omp_in_parallel() && !threads_itself);
  const int threads = sliceable ? omp_get_max_threads() : 1;
  const SliceSide plan_side = trans_a ? SliceSide::kLonger : side;  // see kOneDnnBf16Side
  const GemmSlicePlan plan = gemm_slice_plan(slicing, m, n, k, threads, plan_side);
  if (plan.size() == 1) {
    gemm_unchecked(kernel, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bias);
    return;
  }
  const auto count = static_cast<int64_t>(plan.size());
  if (slicing == GemmSlicing::kShapeFixed) {  // the same slices on one thread (inside a region) or a team
    CLEAVE_PARALLEL_FOR(s, count, omp_get_max_threads() > 1,
                        gemm_slice(kernel, plan[static_cast<std::size_t>(s)], trans_a, trans_b, m, n, k, alpha, a, lda,
                                   b, ldb, beta, c, ldc, bias);)
    return;
  }
#pragma omp parallel for schedule(static, 1) num_threads(static_cast<int>(count))
  for (int64_t s = 0; s < count; ++s) {
    gemm_slice(kernel, plan[static_cast<std::size_t>(s)], trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c,
               ldc, bias);
  }
}

template <typename In, typename Out>
void gemm_batched(Kernel<In, Out> kernel, bool threads_itself, SliceSide side, bool trans_a, bool trans_b, int64_t m,
                  int64_t n, int64_t k, float alpha, const In* a, int64_t lda, int64_t stride_a, const In* b,
                  int64_t ldb, int64_t stride_b, float beta, Out* c, int64_t ldc, int64_t stride_c, int64_t batch,
                  GemmSlicing slicing, const float* bias = nullptr) {
  if (m == 0 || n == 0 || batch == 0) return;
  const double mnk = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  // Tiny batches are not worth an OpenMP fork/join (a few microseconds).
  const bool spread = batch > 1 && mnk <= kOpenBlasSingleThreadMnk && mnk * static_cast<double>(batch) >= 32768.0;
  if (spread) {  // inside a region (or at one thread) the same calls in order on the calling thread
    CLEAVE_PARALLEL_FOR(i, batch, omp_get_max_threads() > 1,
                        gemm_unchecked(kernel, trans_a, trans_b, m, n, k, alpha, a + i * stride_a, lda,
                                       b + i * stride_b, ldb, beta, c + i * stride_c, ldc, bias);)
    return;
  }
  for (int64_t i = 0; i < batch; ++i) {
    gemm_threaded(kernel, threads_itself, side, trans_a, trans_b, m, n, k, alpha, a + i * stride_a, lda,
                  b + i * stride_b, ldb, beta, c + i * stride_c, ldc, slicing, bias);
  }
}

void check_bf16_backend(const char* op, GemmBackend backend, Bf16GemmOut c) {
  CLEAVE_ASSERT(gemm_backend_has_bf16(backend),
                "{}: the {} library has no bf16-operand GEMM (only onednn has; widen the operands to f32)", op,
                gemm_backend_name(backend));
  CLEAVE_ASSERT((c.f32 == nullptr) != (c.bf16 == nullptr), "{}: exactly one of C's f32 and bf16 pointers must be set",
                op);
  CLEAVE_CHECK(!gemm_backend_built(backend) || onednn_bf16_supported(),
               "{}: {} has no bf16 matmul on this CPU (its bf16 needs AVX-512): widen the operands to f32 "
               "(device.blas \"auto\" does)",
               op, gemm_backend_description(backend));
}

}  // namespace

GemmSlicePlan::GemmSlicePlan(bool split_n, int64_t extent, int64_t chunk)
    : split_n_(split_n),
      extent_(extent),
      chunk_(chunk >= extent ? extent : chunk),
      count_(chunk >= extent ? 1 : (extent + chunk - 1) / chunk) {}

GemmSlicePlan gemm_slice_plan(GemmSlicing slicing, int64_t m, int64_t n, int64_t k, int threads, SliceSide side) {
  const double mnk = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const bool rows = side == SliceSide::kRows && m >= 2 * kInvariantSlice;
  const bool split_n = !rows && n >= m;
  const int64_t extent = split_n ? n : m;
  const GemmSlicePlan whole(split_n, extent, extent);
  if (slicing == GemmSlicing::kShapeFixed) {
    // kInvariantSlice-wide pieces along the chosen side, by shape only: the same calls for any thread count.
    if (k == 0 || mnk < kSliceMinMnk || extent < 2 * kInvariantSlice) return whole;
    return GemmSlicePlan(split_n, extent, kInvariantSlice);
  }
  // One slice per thread, aligned to kSliceAlign.
  if (threads <= 1 || k == 0 || mnk < kSliceMinMnk || extent < 2 * kSliceAlign) return whole;
  const int64_t slices = std::min<int64_t>(threads, extent / kSliceAlign);
  const int64_t chunk = ((extent + slices - 1) / slices + kSliceAlign - 1) / kSliceAlign * kSliceAlign;
  return GemmSlicePlan(split_n, extent, chunk);
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc, GemmSlicing slicing, GemmLibrary library) {
  check_gemm("gemm", trans_a, trans_b, m, n, k, lda, ldb, ldc);
  CLEAVE_ASSERT(m == 0 || n == 0 || c != nullptr, "gemm: null C for a {}x{} result", m, n);
  CLEAVE_ASSERT(m == 0 || n == 0 || k == 0 || (a != nullptr && b != nullptr), "gemm: null A or B");
  const F32Library lib = f32_library("gemm", library);
  gemm_threaded(lib.kernel, lib.threads_itself, SliceSide::kLonger, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb,
                beta, c, ldc, slicing);
}

void gemm_strided_batched(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                          int64_t lda, int64_t stride_a, const float* b, int64_t ldb, int64_t stride_b, float beta,
                          float* c, int64_t ldc, int64_t stride_c, int64_t batch, GemmSlicing slicing,
                          GemmLibrary library) {
  check_gemm("gemm_strided_batched", trans_a, trans_b, m, n, k, lda, ldb, ldc);
  CLEAVE_ASSERT(batch >= 0, "gemm_strided_batched: negative batch {}", batch);
  if (m == 0 || n == 0 || batch == 0) return;
  CLEAVE_ASSERT(c != nullptr && (k == 0 || (a != nullptr && b != nullptr)), "gemm_strided_batched: null pointer");
  const F32Library lib = f32_library("gemm_strided_batched", library);
  gemm_batched(lib.kernel, lib.threads_itself, SliceSide::kLonger, trans_a, trans_b, m, n, k, alpha, a, lda, stride_a,
               b, ldb, stride_b, beta, c, ldc, stride_c, batch, slicing);
}

void gemm_bf16(GemmLibrary library, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const std::uint16_t* a, int64_t lda, const std::uint16_t* b, int64_t ldb, float beta, Bf16GemmOut c,
               int64_t ldc, GemmSlicing slicing, const float* bias) {
  gemm_bf16_strided_batched(library, trans_a, trans_b, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1,
                            slicing, bias);
}

void gemm_bf16_strided_batched(GemmLibrary library, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                               float alpha, const std::uint16_t* a, int64_t lda, int64_t stride_a,
                               const std::uint16_t* b, int64_t ldb, int64_t stride_b, float beta, Bf16GemmOut c,
                               int64_t ldc, int64_t stride_c, int64_t batch, GemmSlicing slicing,
                               const float* bias) {
  check_gemm("gemm_bf16", trans_a, trans_b, m, n, k, lda, ldb, ldc);
  check_bf16_backend("gemm_bf16", library.backend, c);
  CLEAVE_ASSERT(batch >= 0, "gemm_bf16: negative batch {}", batch);
  CLEAVE_ASSERT(bias == nullptr || (alpha == 1.0f && beta == 0.0f),
                "gemm_bf16: a bias epilogue needs alpha 1 and beta 0 (got alpha {}, beta {})", alpha, beta);
  if (m == 0 || n == 0 || batch == 0) return;
  CLEAVE_ASSERT(k == 0 || (a != nullptr && b != nullptr), "gemm_bf16: null A or B");
  OneDnnMatmuls& matmuls = onednn_matmuls("gemm_bf16", library);
  if (c.f32 != nullptr) {
    const Kernel<std::uint16_t, float> kernel{nullptr, gemm_detail::bf16gemm_onednn_f32, &matmuls, library.shape};
    gemm_batched(kernel, false, kOneDnnBf16Side, trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b,
                 beta, c.f32, ldc, stride_c, batch, slicing, bias);
  } else {
    const Kernel<std::uint16_t, std::uint16_t> kernel{nullptr, gemm_detail::bf16gemm_onednn_bf16, &matmuls,
                                                      library.shape};
    gemm_batched(kernel, false, kOneDnnBf16Side, trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b,
                 beta, c.bf16, ldc, stride_c, batch, slicing, bias);
  }
}

namespace gemm_detail {

void sgemm_openblas(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                    int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b,
              static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

}  // namespace gemm_detail

}  // namespace cleave::kernels::cpu
