// Row-major GEMM on the CPU over a chosen library (gemm_backend.hpp: OpenBLAS, BLIS, oneDNN): f32 operands,
// or bf16 operands with f32 accumulation (oneDNN only).
//
// Invariant: C[m,n] = alpha * op(A) * op(B) + beta * C, op(A) is m x k, op(B) is k x n, all row-major with
// explicit leading dimensions (lda is the row stride of A as stored, i.e. >= k when !trans_a, >= m when
// trans_a). Degenerate sizes are legal: m == 0 or n == 0 touches nothing; k == 0 still scales C by beta
// (beta == 0 writes zeros, never reads C, so a NaN-poisoned C becomes 0 as BLAS specifies).
// Synchronous; the caller owns every buffer, and the state a library keeps between calls (oneDNN's primitives and
// scratchpads, OneDnnMatmuls) comes in GemmLibrary: nothing here is process state.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/gemm_backend.hpp"

namespace cleave::kernels::cpu {

class OneDnnMatmuls;  // onednn_matmuls.hpp

// The library a GEMM runs on and the run's state it keeps between calls: oneDNN needs `onednn` (its primitives
// and scratchpads; the CPU backend's resources own one per run); OpenBLAS and BLIS keep none and ignore it.
// `shape`: whether m and k change from call to call (gemm_backend.hpp; a grouped GEMM's groups are kVarying).
struct GemmLibrary {
  GemmBackend backend = GemmBackend::kOpenBlas;
  OneDnnMatmuls* onednn = nullptr;
  GemmShape shape = GemmShape::kExact;
};

// How a large GEMM is cut over the OpenMP team. OpenBLAS's bits depend on the slice shapes (measured:
// thousands of differing elements between 1 and 2 slices of a 512x384x128 product), so deterministic mode
// (train.deterministic) asks for kShapeFixed: slices of a fixed width chosen by the shape alone, shared out
// over however many threads there are, so one rank with N threads and N ranks of one thread compute the same
// bits. kPerThread (the default) cuts one slice per thread. Slicing needs OpenBLAS at one thread
// (configure_kernel_threads); otherwise OpenBLAS threads the call itself.
enum class GemmSlicing { kPerThread, kShapeFixed };

// One sgemm of a sliced GEMM: columns [lo, hi) of op(B) and C (split_n), or rows [lo, hi) of op(A) and C.
struct GemmSlice {
  bool split_n = true;
  int64_t lo = 0;
  int64_t hi = 0;
  bool operator==(const GemmSlice&) const = default;
};

// Which side of C the slices cut: kLonger, C's longer side (columns when n >= m); kRows, rows (each slice a dense
// block of C, what oneDNN's fastest kernels take) unless C has under 128 rows, then the longer side. gemm.cpp picks
// the side per call (kRows for oneDNN's bf16 kernels when A is not transposed, else kLonger).
enum class SliceSide { kLonger, kRows };

// The sgemm calls `gemm` makes for an m x n x k product: `size()` slices of `chunk` along one side of C, the last
// one cut at C's edge. A value (no storage: slice i is computed), so planning a GEMM allocates nothing, however many
// slices a wide C takes in deterministic mode. Two plans are equal when their slices are.
class GemmSlicePlan {
 public:
  GemmSlicePlan(bool split_n, int64_t extent, int64_t chunk);  // chunk >= extent: one slice covering C
  std::size_t size() const { return static_cast<std::size_t>(count_); }
  GemmSlice operator[](std::size_t i) const {
    const int64_t lo = static_cast<int64_t>(i) * chunk_;
    return GemmSlice{split_n_, lo, lo + chunk_ < extent_ ? lo + chunk_ : extent_};
  }
  GemmSlice front() const { return (*this)[0]; }
  bool operator==(const GemmSlicePlan&) const = default;

  class Iterator {
   public:
    Iterator(const GemmSlicePlan& plan, std::size_t i) : plan_(&plan), i_(i) {}
    GemmSlice operator*() const { return (*plan_)[i_]; }
    Iterator& operator++() {
      ++i_;
      return *this;
    }
    bool operator==(const Iterator& o) const { return i_ == o.i_; }

   private:
    const GemmSlicePlan* plan_;
    std::size_t i_;
  };
  Iterator begin() const { return {*this, 0}; }
  Iterator end() const { return {*this, size()}; }

 private:
  bool split_n_;
  int64_t extent_;
  int64_t chunk_;
  int64_t count_;
};

// The plan `gemm` makes with `threads` OpenMP threads and OpenBLAS at one thread: one slice covering C when slicing
// does not pay. A pure function of its arguments, so the determinism contract (kShapeFixed: the same slices for
// every thread count) is testable without relying on which kernels the machine's OpenBLAS picked.
GemmSlicePlan gemm_slice_plan(GemmSlicing slicing, int64_t m, int64_t n, int64_t k, int threads,
                              SliceSide side = SliceSide::kLonger);

// `library.backend` must be built (gemm_backend_built); an absent one throws Error naming it. oneDNN without
// `library.onednn` is a caller's bug (InternalError naming OneDnnMatmuls).
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc, GemmSlicing slicing = GemmSlicing::kPerThread,
          GemmLibrary library = {});

// `batch` independent GEMMs; matrix i of A starts at a + i*stride_a (likewise B, C). Strides are in
// floats; a stride of 0 broadcasts one A or B to every batch entry. The C matrices must not share an
// element (interleaved layouts such as per-head column blocks, stride_c = head_dim < ldc, are fine).
void gemm_strided_batched(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                          int64_t lda, int64_t stride_a, const float* b, int64_t ldb, int64_t stride_b, float beta,
                          float* c, int64_t ldc, int64_t stride_c, int64_t batch,
                          GemmSlicing slicing = GemmSlicing::kPerThread, GemmLibrary library = {});

// bf16 operands (bit patterns of round-to-nearest-even bf16), f32 accumulation, on a library with bf16 kernels
// (gemm_backend_has_bf16; others throw). C is f32 (c_f32) or bf16 (c_bf16, rounded once at the end); exactly
// one is non-null. Same contract, slicing and determinism as gemm.
// `bias` (null, or n floats; alpha 1 and beta 0 only): C = op(A) op(B) + bias in every row, the bias added to the
// f32 accumulator in the library's epilogue before C is stored (rounded once when bf16): one pass over C, the
// same bits as the product in f32 followed by a bias pass (KernelGemmBf16Bias.*).
struct Bf16GemmOut {
  float* f32 = nullptr;
  std::uint16_t* bf16 = nullptr;
};
void gemm_bf16(GemmLibrary library, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const std::uint16_t* a, int64_t lda, const std::uint16_t* b, int64_t ldb, float beta, Bf16GemmOut c,
               int64_t ldc, GemmSlicing slicing = GemmSlicing::kPerThread, const float* bias = nullptr);
void gemm_bf16_strided_batched(GemmLibrary library, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                               float alpha, const std::uint16_t* a, int64_t lda, int64_t stride_a,
                               const std::uint16_t* b, int64_t ldb, int64_t stride_b, float beta, Bf16GemmOut c,
                               int64_t ldc, int64_t stride_c, int64_t batch,
                               GemmSlicing slicing = GemmSlicing::kPerThread, const float* bias = nullptr);

}  // namespace cleave::kernels::cpu
