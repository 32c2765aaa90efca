// Internal to flash_attention.cpp (forward) and flash_attention_backward.cpp: what both halves of the CPU
// FlashAttention-2 kernel share — the shape check, the block and query-chunk sizes, the per-thread scratch bound,
// the block GEMM on the calling thread alone, the f32 / bf16 row stores, and the score products.
//
// Invariant: every helper is a function of its arguments alone (no team, no thread count): the block GEMM is never
// sliced, and the query chunks depend on q_len alone, so the kernel's bits do not depend on the thread count nor on
// how the batch and the heads are split.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "engine/core/error.hpp"
#include "kernels/cpu/cast.hpp"
#include "kernels/cpu/flash_attention.hpp"
#include "kernels/cpu/flash_attention_dots.hpp"
#include "kernels/cpu/gemm_kernels.hpp"
#include "kernels/cpu/vector_isa.hpp"

namespace cleave::kernels::cpu::flash_blocks {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

inline void check_shape(const char* op, const FlashAttentionShape& s) {
  CLEAVE_ASSERT(s.batch >= 0 && s.q_len >= 0 && s.kv_len >= 0 && s.q_heads > 0 && s.kv_heads > 0 &&
                    s.q_heads % s.kv_heads == 0 && s.head_dim > 0,
                "{}: bad shape batch {} q_len {} kv_len {} heads {}/{} head_dim {}", op, s.batch, s.q_len, s.kv_len,
                s.q_heads, s.kv_heads, s.head_dim);
  CLEAVE_ASSERT(s.ld_q >= s.q_heads * s.head_dim && s.ld_o >= s.q_heads * s.head_dim &&
                    s.ld_k >= s.kv_heads * s.head_dim && s.ld_v >= s.kv_heads * s.head_dim,
                "{}: row strides q {} k {} v {} out {} too small for {}/{} heads of {}", op, s.ld_q, s.ld_k, s.ld_v,
                s.ld_o, s.q_heads, s.kv_heads, s.head_dim);
  CLEAVE_ASSERT(s.causal || s.window <= 0, "{}: a sliding window ({}) needs causal attention", op, s.window);
}

// Block rows actually used (a short sequence takes less scratch).
inline int64_t block_q(const FlashAttentionShape& s) { return std::max<int64_t>(1, std::min(kFlashBlockQ, s.q_len)); }
inline int64_t block_k(const FlashAttentionShape& s) {
  return std::max<int64_t>(1, std::min(s.key_block > 0 ? s.key_block : kFlashBlockK, s.kv_len));
}

// The backward's query chunks: the rows [c * chunk_rows, (c + 1) * chunk_rows) of every (batch, kv group), at most
// kMaxChunks of at least kChunkMinRows rows (whole query blocks); a function of q_len alone. A key block's dK and dV
// are the sum, in chunk order from zero, of each chunk's own sum over the group's heads and its query blocks. A task
// takes every chunk of its group in turn, or (chunk_tasks) one chunk, its sums going to a partial buffer added in
// chunk order afterwards: the same additions, so the bits depend neither on the thread count nor on how the batch
// and the heads are split (tensor or all-to-all context parallelism).
constexpr int64_t kMaxChunks = 4;
constexpr int64_t kChunkMinRows = 4 * kFlashBlockQ;
inline int64_t chunk_rows(const FlashAttentionShape& s) {
  const int64_t bq = block_q(s);
  const int64_t rows = std::max(kChunkMinRows, (s.q_len + kMaxChunks - 1) / kMaxChunks);
  return (rows + bq - 1) / bq * bq;
}
inline int64_t q_chunks(const FlashAttentionShape& s) {
  return std::max<int64_t>(1, (s.q_len + chunk_rows(s) - 1) / chunk_rows(s));
}

// One task per chunk where batch x kv heads leaves threads idle: fewer groups than twice the threads and not a
// multiple of them (1 or 3 groups on 2 threads).
inline bool chunk_tasks(const FlashAttentionShape& s, int threads) {
  const int64_t groups = s.batch * s.kv_heads;
  return threads > 1 && q_chunks(s) > 1 && groups < 2 * threads && groups % threads != 0;
}

// The partial dK and dV sums of every chunk under chunk_tasks: [batch, kv_heads, chunks, 2, kv_len, hd].
inline int64_t partial_floats(const FlashAttentionShape& s, int threads) {
  return chunk_tasks(s, threads) ? s.batch * s.kv_heads * q_chunks(s) * 2 * s.kv_len * s.head_dim : 0;
}

// The bf16 value products' operands, on either path (one region, so the bound does not depend on the CPU):
// forward, the dot path's P rounded and V's pairs, or the GEMM path's widened V [bk, hd]; backward, the dot path's
// K's, Q's and dO's pairs and dS and P^T (then dS^T) rounded, or the GEMM path's widened K [bk, hd], Q and dO
// [bq, hd] (P and dS rounded in place).
inline int64_t forward_value_floats(const FlashAttentionShape& s) {
  const int64_t bq = block_q(s), bk = block_k(s), hd = s.head_dim;
  return std::max(flash_dots::rounded_floats(bq, bk) + flash_dots::pairs_floats(hd, bk), bk * hd);
}
inline int64_t backward_value_floats(const FlashAttentionShape& s) {
  const int64_t bq = block_q(s), bk = block_k(s), hd = s.head_dim;
  const int64_t dots = flash_dots::pairs_floats(hd, bk) + 2 * flash_dots::pairs_floats(hd, bq) +
                       flash_dots::rounded_floats(bq, bk) + flash_dots::rounded_floats(bk, bq);
  return std::max(dots, bk * hd + 2 * bq * hd);
}

// Forward: S [bq, bk], acc [bq, hd], m and l [bq], and f32: K^T [hd, bk]; bf16 (flash_attention_dots.hpp): Q's
// rows and K's pairs for the score product, and the value region.
// Backward: P and dS [bq, bk], D [group, q_len], dK and dV [bk, hd] and a chunk's share of them; f32: K^T and V^T
// [hd, bk]; bf16: K's and V's pairs and Q's and dO's rows for the score products, K's, Q's and dO's pairs along the
// keys / queries and P^T (then dS^T) and dS rounded for the value products (the value region), the task's dQ in f32
// [group, q_len, hd] and two rows [hd]. (A task uses `group x its rows` of D and dQ.)
inline int64_t per_thread_floats(const FlashAttentionShape& s, bool bf16) {
  const int64_t bq = block_q(s), bk = block_k(s), hd = s.head_dim, group = s.q_heads / s.kv_heads;
  const int64_t chunk = s.q_len;  // a chunk's rows at most; so the bound does not depend on the batch
  const int64_t rows = flash_dots::rows_floats(bq, hd), pairs = flash_dots::pairs_floats(bk, hd);
  const int64_t forward = bq * bk + bq * hd + 2 * bq, backward = 2 * bq * bk + group * chunk + 4 * bk * hd;
  if (!bf16) return std::max(forward + hd * bk, backward + 2 * hd * bk);
  return std::max(forward + rows + pairs + forward_value_floats(s),
                  backward + 2 * pairs + 2 * rows + backward_value_floats(s) + group * chunk * hd + 2 * hd);
}

// One block GEMM on the calling thread alone (gemm_kernels.hpp): never sliced, so its bits depend only on its
// arguments, inside or outside the parallel region (an `if (false)` region is inactive, and gemm() would cut a
// large enough block over the whole team there).
inline void single_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0 || k == 0) return;  // k == 0 never happens here (head_dim, rows, cols > 0)
  gemm_detail::sgemm_openblas(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// A row block of the f32 kernel (row stride ld), or a bf16 operand packed for the dot path.
struct Block {
  const float* p;
  int64_t ld;
};

// A bf16 block [rows, hd] (row stride ld) widened (exactly) into buf for the f32 GEMM.
inline Block widen_block(const std::uint16_t* src, int64_t ld, int64_t rows, int64_t hd, float* buf) {
  for (int64_t r = 0; r < rows; ++r) cast_bf16_to_f32_serial(src + r * ld, buf + r * hd, hd);
  return {buf, hd};
}

// One output row of hd f32 values into its tensor (narrowed to bf16: nearest even, as cast_f32_to_bf16).
inline void store_row(const float* f, float* dst, int64_t hd) { std::memcpy(dst, f, hd * sizeof(float)); }
inline void store_row(const float* f, std::uint16_t* dst, int64_t hd) { cast_f32_to_bf16_serial(f, dst, hd); }
// rows such rows (f with row stride ldf, dst with ld), in one call for bf16 (the same bits as row by row).
inline void store_rows(const float* f, int64_t ldf, float* dst, int64_t ld, int64_t rows, int64_t hd) {
  for (int64_t r = 0; r < rows; ++r) store_row(f + r * ldf, dst + r * ld, hd);
}
inline void store_rows(const float* f, int64_t ldf, std::uint16_t* dst, int64_t ld, int64_t rows, int64_t hd) {
  cast_f32_to_bf16_rows_serial(f, ldf, dst, ld, rows, hd);
}

// t [cols, ldt] = a^T for a [rows, lda], in 8 x 8 tiles. The kernel multiplies by K^T and V^T through these
// copies: row-major Q K^T is a transposed-A product to OpenBLAS (column-major), which sends it to its packing
// GEMM rather than its small-matrix kernels at these sizes (RESULTS-2026-11-30-attention-vs-torch.md).
inline void transpose_block(const float* a, int64_t lda, int64_t rows, int64_t cols, float* t, int64_t ldt) {
  constexpr int64_t kTile = 8;
  for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
    const int64_t r1 = std::min(rows, r0 + kTile);
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      const int64_t c1 = std::min(cols, c0 + kTile);
      for (int64_t c = c0; c < c1; ++c) {
        for (int64_t r = r0; r < r1; ++r) t[c * ldt + r] = a[r * lda + c];
      }
    }
  }
}

// The right-hand side of a score product S = scale * A B^T over one key block: f32, B transposed (kT / vT); bf16,
// B's pairs (flash_attention_dots.hpp).
struct ScoreRhs {
  const float* p;
};
inline ScoreRhs prepare_rhs(const float* b, int64_t ld, int64_t cols, int64_t hd, float* t, int64_t ldt) {
  transpose_block(b, ld, cols, hd, t, ldt);
  return {t};
}
inline ScoreRhs prepare_rhs(const std::uint16_t* b, int64_t ld, int64_t cols, int64_t hd, float* pairs, int64_t) {
  flash_dots::pack_pairs(b, ld, cols, hd, pairs);
  return {pairs};
}

// The left-hand side's rows: f32 in place; bf16 as the dot path's rows.
inline Block prepare_lhs(flash_dots::DotIsa, const float* a, int64_t ld, int64_t, int64_t, float*) { return {a, ld}; }
inline Block prepare_lhs(flash_dots::DotIsa dot, const std::uint16_t* a, int64_t ld, int64_t rows, int64_t hd,
                         float* buf) {
  flash_dots::pack_rows(dot, a, ld, rows, hd, buf);
  return {buf, flash_dots::pair_dim(hd)};
}

// S [rows, bk] = scale * A B^T: the f32 GEMM on B^T, or the bf16 dot path (f32 accumulation of the exact products).
template <class T>
void score_product(flash_dots::DotIsa dot, const Block& a, const ScoreRhs& b, int64_t rows, int64_t cols, int64_t hd,
                   int64_t bk, float scale, float* S) {
  if constexpr (std::is_same_v<T, std::uint16_t>) {
    flash_dots::scores(dot, a.p, rows, b.p, cols, hd, scale, S, bk);
  } else {
    single_gemm(false, false, rows, cols, hd, scale, a.p, a.ld, b.p, bk, 0.0f, S, bk);
  }
}

// The run-time paths: the element-wise rows', the bf16 score products' and the bf16 value products' (a function of
// the dot path, flash_dots::value_products_for, unless forced).
struct Paths {
  VectorIsa isa;
  flash_dots::DotIsa dot;
  flash_dots::ValueProducts value;
};

inline Paths paths_for(VectorIsa isa, flash_dots::DotIsa dot, FlashValuePath value) {
  using flash_dots::ValueProducts;
  const ValueProducts v = value == FlashValuePath::kAuto   ? flash_dots::value_products_for(dot)
                          : value == FlashValuePath::kDots ? ValueProducts::kDots
                                                           : ValueProducts::kGemm;
  return {isa, dot, v};
}
inline Paths run_paths(FlashValuePath value) { return paths_for(best_vector_isa(), flash_dots::best_dot_isa(), value); }

}  // namespace cleave::kernels::cpu::flash_blocks
