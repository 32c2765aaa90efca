// Internal to kernels/cpu's GEMM: each library's single-threaded kernel for one whole (unsliced) GEMM, the
// unit gemm.cpp cuts work into. Callers have checked the sizes (m, n, k > 0; leading dimensions valid).
//
// Invariant: a kernel here runs on the calling thread alone, inside or outside an OpenMP parallel region, and
// its bits depend only on its arguments (never on the thread count), which is what makes the sliced GEMM of
// gemm.cpp deterministic for every library. A library not in this build throws Error naming it. oneDNN's kernels
// take the run's primitive cache and scratchpads (onednn_matmuls.hpp) as their first argument and whether m and k
// vary from call to call (GemmShape, gemm_backend.hpp) as their second.
#pragma once

#include <cstdint>

#include "kernels/cpu/gemm_backend.hpp"
#include "kernels/cpu/onednn_matmuls.hpp"

namespace cleave::kernels::cpu::gemm_detail {

// f32 operands, f32 C.
void sgemm_openblas(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                    const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                    std::int64_t ldc);
void sgemm_blis(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                std::int64_t ldc);
void sgemm_onednn(OneDnnMatmuls& matmuls, GemmShape shape, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n,
                  std::int64_t k, float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                  float beta, float* c, std::int64_t ldc);

// bf16 operands (bit patterns), f32 accumulation; C f32 or bf16 (rounded once, to nearest even).
void bf16gemm_onednn_f32(OneDnnMatmuls& matmuls, GemmShape shape, bool trans_a, bool trans_b, std::int64_t m,
                         std::int64_t n, std::int64_t k, float alpha, const std::uint16_t* a, std::int64_t lda,
                         const std::uint16_t* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc);
void bf16gemm_onednn_bf16(OneDnnMatmuls& matmuls, GemmShape shape, bool trans_a, bool trans_b, std::int64_t m,
                          std::int64_t n, std::int64_t k, float alpha, const std::uint16_t* a, std::int64_t lda,
                          const std::uint16_t* b, std::int64_t ldb, float beta, std::uint16_t* c, std::int64_t ldc);

// The same with an f32 bias of n elements added to every row of C in the kernel's epilogue, before C is stored
// (rounded once when bf16): C = A B + bias, alpha 1 and beta 0.
void bf16gemm_onednn_f32_bias(OneDnnMatmuls& matmuls, GemmShape shape, bool trans_a, bool trans_b, std::int64_t m,
                              std::int64_t n, std::int64_t k, const std::uint16_t* a, std::int64_t lda,
                              const std::uint16_t* b, std::int64_t ldb, const float* bias, float* c, std::int64_t ldc);
void bf16gemm_onednn_bf16_bias(OneDnnMatmuls& matmuls, GemmShape shape, bool trans_a, bool trans_b, std::int64_t m,
                               std::int64_t n, std::int64_t k, const std::uint16_t* a, std::int64_t lda,
                               const std::uint16_t* b, std::int64_t ldb, const float* bias, std::uint16_t* c,
                               std::int64_t ldc);

}  // namespace cleave::kernels::cpu::gemm_detail
