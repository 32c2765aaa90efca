// Row-major GEMM on the GPU through cuBLASLt (twin of kernels/cpu/gemm.hpp), f32 or bf16 inputs with f32
// accumulation, plain or strided-batched, with cuBLASLt's fused bias and GELU epilogues.
//
// Invariant: for each batch entry i,
//   C_i[m,n] = epilogue(alpha * op(A_i) * op(B_i) + beta * C_i)
// with op(A) m x k and op(B) k x n, all row-major with explicit leading dimensions exactly as on the CPU
// (lda is the row stride of A as stored: >= k when !trans_a, >= m when trans_a). Matrix i of A starts at
// a + i * stride_a elements (likewise B, C; a stride of 0 broadcasts). beta == 0 never reads C. Degenerate
// sizes as on the CPU: m == 0 or n == 0 touches nothing; k == 0 scales C by beta (no epilogue allowed).
//
// CUTLASS-style launch: gemm_can_implement(args) says why a problem is refused ("" when it is accepted),
// gemm_workspace_size(args) is the workspace to pass; gemm() allocates nothing and does not block the host.
// Types: A/B f32 -> C f32 (kStrict: true f32 products; kTF32: tensor-core TF32), or A/B bf16 -> C bf16 or f32.
// The GEMM runs as the column-major product C^T = op(B)^T op(A)^T, so cuBLASLt's "rows of D" are our n:
// bias has n entries (one per output column, the output dtype) and the GELU aux matrix is row-major
// [m, ld_aux] (ld_aux >= n, a multiple of 8, output dtype) holding the pre-activation. The aux epilogues
// (gelu_aux, bias_gelu_aux, gelu_backward) are offered for bf16 inputs only: gemm_can_implement refuses them
// for f32, for which cuBLASLt may have no algorithm, so callers take the unfused path instead of failing in
// the heuristic at run time.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/core/dtype.hpp"
#include "kernels/cuda/lru_cache.hpp"

namespace cleave::kernels::cuda {

enum class GemmEpilogue {
  kNone,
  kBias,          // + bias[col]
  kGelu,          // gelu(.)
  kBiasGelu,      // gelu(. + bias[col])
  kGeluAux,       // gelu(.), and the pre-activation written to aux
  kBiasGeluAux,   // gelu(. + bias[col]), and the pre-activation (with bias) written to aux
  kGeluBackward,  // (.) * gelu'(aux): the input gradient of a GELU whose input aux holds (cuBLASLt DGELU)
};
std::string_view gemm_epilogue_name(GemmEpilogue epilogue);

enum class GemmMath { kStrict, kTF32 };

struct GemmArgs {
  bool trans_a = false;
  bool trans_b = false;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  float alpha = 1.0f;
  float beta = 0.0f;
  DType input_type = DType::kF32;   // A and B
  DType output_type = DType::kF32;  // C (also bias and aux)
  const void* a = nullptr;
  int64_t lda = 0;
  int64_t stride_a = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  int64_t stride_b = 0;
  void* c = nullptr;
  int64_t ldc = 0;
  int64_t stride_c = 0;
  int64_t batch = 1;
  GemmEpilogue epilogue = GemmEpilogue::kNone;
  const void* bias = nullptr;
  void* aux = nullptr;  // written by k*GeluAux, read by kGeluBackward
  int64_t ld_aux = 0;
  GemmMath math = GemmMath::kStrict;

  std::string str() const;  // "gemm 512x768x3072 bf16->f32 NT batch 1 epilogue bias_gelu_aux"
};

// ---- Plan caching (gemm.cpp; docs/cuda.md "GEMM plans") ---------------------------------------------------
// Two bounded LRU caches (lru_cache.hpp):
//  - plans: the exact problem's descriptors and algorithm, keyed by shape, leading dimensions, types, epilogue,
//    pointer alignments and workspace size (a hit costs one map lookup);
//  - algorithms: the heuristic's answer for the problem's *heuristic problem* (gemm_heuristic_problem: the row
//    extents m and k rounded up to a bucket), so problems that differ only in a row count within a bucket (a
//    mixture-of-experts run's expert groups) share one heuristic query.
// An algorithm found for the bucket is used for an exact problem only after cublasLtMatmulAlgoCheck accepts it
// on the exact descriptors with a workspace that fits; otherwise the exact problem gets its own query. So the
// algorithm a problem runs with depends on its shape alone (not on which problems came first or what was
// evicted): runs are repeatable.
struct GemmCacheCapacity {
  std::size_t plans = 512;
  std::size_t algorithms = 256;
};

struct GemmCacheStats {
  LruCacheStats plans;
  LruCacheStats algorithms;
  std::size_t plans_cached = 0;
  std::size_t algorithms_cached = 0;
  std::uint64_t heuristic_queries = 0;  // cublasLtMatmulAlgoGetHeuristic calls
  std::uint64_t bucket_reused = 0;      // plans that run with their bucket's algorithm
  std::uint64_t bucket_rejected = 0;    // ... whose bucket's algorithm the check refused (an exact query instead)
};

// An extent of at most 16 unchanged; above, rounded up to a multiple of 2^(floor(log2(extent - 1)) - 2): four
// buckets per octave, at most 25% above the extent (17 -> 20, 33 -> 40, 1000 -> 1024, 1025 -> 1280).
std::int64_t gemm_heuristic_extent(std::int64_t extent);
// The problem whose heuristic answer `args` reuses: batch 1 problems get m and k through gemm_heuristic_extent
// where the larger extent keeps every leading dimension valid (m unless A is stored transposed with lda below
// it; k unless A is stored untransposed or B transposed with a leading dimension below it); n, the leading
// dimensions, pointers, types and epilogue unchanged. Batched problems are their own heuristic problem.
GemmArgs gemm_heuristic_problem(const GemmArgs& args);

// The cuBLASLt handle and the plan caches above, so a training step's repeated shapes pay for the heuristic
// once and a run with many row counts keeps its memory bounded. Not thread-safe: one per host thread (it may
// serve several streams of a device).
class GemmContext {
 public:
  explicit GemmContext(GemmCacheCapacity capacity = {});
  ~GemmContext();
  GemmContext(const GemmContext&) = delete;
  GemmContext& operator=(const GemmContext&) = delete;

  std::size_t plans_cached() const;
  GemmCacheStats cache_stats() const;
  cublasLtHandle_t handle() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  friend void gemm(GemmContext&, const GemmArgs&, void*, std::size_t, cudaStream_t);
};

// Recommended workspace: 32 MiB (NVIDIA's recommendation for Hopper; Ampere uses less), 0 when nothing runs.
// gemm_workspace_size_max() is that size for any problem: a device's one shared workspace (the op seam's
// CudaResources owns it) is allocated once at this size.
std::size_t gemm_workspace_size(const GemmArgs& args);
std::size_t gemm_workspace_size_max();

// Empty when cuBLASLt can be asked to run `args`; otherwise why not (names the field and the values).
std::string gemm_can_implement(const GemmArgs& args);

// Runs `args` on `stream`. workspace: device memory aligned to 256 bytes (workspace_bytes may be 0, which
// limits cuBLASLt to algorithms without workspace). Throws Error when gemm_can_implement refuses, and
// BackendError naming the problem when cuBLASLt finds no algorithm or fails.
void gemm(GemmContext& context, const GemmArgs& args, void* workspace, std::size_t workspace_bytes,
          cudaStream_t stream);

}  // namespace cleave::kernels::cuda
