// FlashAttention-2 on the CPU (see flash_attention.hpp; the math is in docs/ops.md "Attention").
//
// Forward, one task per (batch, query head, query block of kFlashBlockQ rows): S = scale * Q K^T over key
// blocks of kFlashBlockK (one small GEMM each), the online-softmax update of the row maxima m, sums l and the
// unnormalised accumulator, then acc += P V (GEMM). Backward, one task per (batch, kv head): D = rowsum(dO * O)
// once per row, then per key block and query block it recomputes P = exp(S - lse) and runs the four GEMMs dV +=
// P^T dO, dP = dO V^T, dQ += dS K, dK += dS^T Q with dS = P (dP - D) scale; a key block's dK and dV sum, chunk by
// query chunk (chunk_rows), the chunk's sum over the group's query heads, and dQ rows have a single writer. Where
// the groups leave threads idle, one task per chunk (chunk_tasks) with the same additions. Masked entries of P and
// dS are written as exact zeros (exp_vec never returns 0).
//
// bf16 operands: written once over the element type. The score products (Q K^T, dO V^T) run on the bf16 blocks
// (flash_attention_dots.hpp: key / value pairs packed once per key block); every other block a GEMM reads is
// widened (exactly) into the thread's scratch as it is loaded, each output row narrowed as it is stored; the chunk's
// dQ is summed in f32 over the key blocks in the thread's scratch and narrowed once when the task ends, dK and dV per
// key block (added to the widened old row when accumulating).
#include "kernels/cpu/flash_attention.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "engine/core/error.hpp"
#include "kernels/cpu/cast.hpp"
#include "kernels/cpu/flash_attention_dots.hpp"
#include "kernels/cpu/flash_attention_rows.hpp"
#include "kernels/cpu/gemm_kernels.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/vector_isa.hpp"

namespace cleave::kernels::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

void check_shape(const char* op, const FlashAttentionShape& s) {
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

using flash_rows::key_hi;
using flash_rows::key_lo;

// Query rows [lo, hi) that see at least one key of [kb, ke).
void query_range(const FlashAttentionShape& s, int64_t kb, int64_t ke, int64_t& lo, int64_t& hi) {
  lo = s.causal ? std::clamp<int64_t>(s.k_offset + kb - s.q_offset, 0, s.q_len) : 0;
  hi = s.window > 0 ? std::clamp<int64_t>(s.k_offset + ke - 1 + s.window - s.q_offset, 0, s.q_len) : s.q_len;
}

// Block rows actually used (a short sequence takes less scratch).
int64_t block_q(const FlashAttentionShape& s) { return std::max<int64_t>(1, std::min(kFlashBlockQ, s.q_len)); }
int64_t block_k(const FlashAttentionShape& s) { return std::max<int64_t>(1, std::min(kFlashBlockK, s.kv_len)); }

// The backward's query chunks: the rows [c * chunk_rows, (c + 1) * chunk_rows) of every (batch, kv group), at most
// kMaxChunks of at least kChunkMinRows rows (whole query blocks); a function of q_len alone. A key block's dK and dV
// are the sum, in chunk order from zero, of each chunk's own sum over the group's heads and its query blocks. A task
// takes every chunk of its group in turn, or (chunk_tasks) one chunk, its sums going to a partial buffer added in
// chunk order afterwards: the same additions, so the bits depend neither on the thread count nor on how the batch
// and the heads are split (tensor or all-to-all context parallelism).
constexpr int64_t kMaxChunks = 4;
constexpr int64_t kChunkMinRows = 4 * kFlashBlockQ;
int64_t chunk_rows(const FlashAttentionShape& s) {
  const int64_t bq = block_q(s);
  const int64_t rows = std::max(kChunkMinRows, (s.q_len + kMaxChunks - 1) / kMaxChunks);
  return (rows + bq - 1) / bq * bq;
}
int64_t q_chunks(const FlashAttentionShape& s) {
  return std::max<int64_t>(1, (s.q_len + chunk_rows(s) - 1) / chunk_rows(s));
}

// One task per chunk where batch x kv heads leaves threads idle: fewer groups than twice the threads and not a
// multiple of them (1 or 3 groups on 2 threads).
bool chunk_tasks(const FlashAttentionShape& s, int threads) {
  const int64_t groups = s.batch * s.kv_heads;
  return threads > 1 && q_chunks(s) > 1 && groups < 2 * threads && groups % threads != 0;
}

// The partial dK and dV sums of every chunk under chunk_tasks: [batch, kv_heads, chunks, 2, kv_len, hd].
int64_t partial_floats(const FlashAttentionShape& s, int threads) {
  return chunk_tasks(s, threads) ? s.batch * s.kv_heads * q_chunks(s) * 2 * s.kv_len * s.head_dim : 0;
}

// Forward: S [bq, bk], acc [bq, hd], m and l [bq], and f32: K^T [hd, bk]; bf16: Q's rows and K's pairs for the
// score products (flash_attention_dots.hpp), V widened [bk, hd].
// Backward: P and dS [bq, bk], D [group, q_len], dK and dV [bk, hd] and a chunk's share of them; f32: K^T and V^T
// [hd, bk]; bf16: K's and V's pairs, K widened [bk, hd], Q's and dO's rows, Q and dO widened [bq, hd], the task's
// dQ in f32 [group, q_len, hd] and two rows [hd]. (A task uses `group x its rows` of D and dQ.)
int64_t per_thread_floats(const FlashAttentionShape& s, bool bf16) {
  const int64_t bq = block_q(s), bk = block_k(s), hd = s.head_dim, group = s.q_heads / s.kv_heads;
  const int64_t chunk = s.q_len;  // a chunk's rows at most; so the bound does not depend on the batch
  const int64_t rows = flash_dots::rows_floats(bq, hd), pairs = flash_dots::pairs_floats(bk, hd);
  const int64_t forward = bq * bk + bq * hd + 2 * bq, backward = 2 * bq * bk + group * chunk + 4 * bk * hd;
  if (!bf16) return std::max(forward + hd * bk, backward + 2 * hd * bk);
  return std::max(forward + rows + pairs + bk * hd,
                  backward + 2 * pairs + bk * hd + 2 * rows + 2 * bq * hd + group * chunk * hd + 2 * hd);
}

// One block GEMM on the calling thread alone (gemm_kernels.hpp): never sliced, so its bits depend only on its
// arguments, inside or outside the parallel region (an `if (false)` region is inactive, and gemm() would cut a
// large enough block over the whole team there).
void single_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0 || k == 0) return;  // k == 0 never happens here (head_dim, rows, cols > 0)
  gemm_detail::sgemm_openblas(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// `rows` rows of head_dim values (row stride ld) as f32 for the block GEMMs: f32 in place; bf16 widened (exactly)
// into buf, row stride hd. The GEMMs' bits do not depend on the strides or the alignment (the library packs both
// operands before its kernel runs).
struct Block {
  const float* p;
  int64_t ld;
};
Block load_block(const float* src, int64_t ld, int64_t, int64_t, float*) { return {src, ld}; }
Block load_block(const std::uint16_t* src, int64_t ld, int64_t rows, int64_t hd, float* buf) {
  for (int64_t r = 0; r < rows; ++r) cast_bf16_to_f32_serial(src + r * ld, buf + r * hd, hd);
  return {buf, hd};
}

// One output row of hd f32 values into its tensor (narrowed to bf16: nearest even, as cast_f32_to_bf16).
void store_row(const float* f, float* dst, int64_t hd) { std::memcpy(dst, f, hd * sizeof(float)); }
void store_row(const float* f, std::uint16_t* dst, int64_t hd) { cast_f32_to_bf16_serial(f, dst, hd); }

// t [cols, ldt] = a^T for a [rows, lda], in 8 x 8 tiles. The kernel multiplies by K^T and V^T through these
// copies: row-major Q K^T is a transposed-A product to OpenBLAS (column-major), which sends it to its packing
// GEMM rather than its small-matrix kernels at these sizes (RESULTS-2026-11-30-attention-vs-torch.md).
void transpose_block(const float* a, int64_t lda, int64_t rows, int64_t cols, float* t, int64_t ldt) {
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
ScoreRhs prepare_rhs(const float* b, int64_t ld, int64_t cols, int64_t hd, float* t, int64_t ldt) {
  transpose_block(b, ld, cols, hd, t, ldt);
  return {t};
}
ScoreRhs prepare_rhs(const std::uint16_t* b, int64_t ld, int64_t cols, int64_t hd, float* pairs, int64_t) {
  flash_dots::pack_pairs(b, ld, cols, hd, pairs);
  return {pairs};
}

// The left-hand side's rows: f32 in place; bf16 as the dot path's rows.
Block prepare_lhs(flash_dots::DotIsa, const float* a, int64_t ld, int64_t, int64_t, float*) { return {a, ld}; }
Block prepare_lhs(flash_dots::DotIsa dot, const std::uint16_t* a, int64_t ld, int64_t rows, int64_t hd, float* buf) {
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

// The forward's per-thread scratch, laid out as per_thread_floats counts it.
struct ForwardScratch {
  float* S;       // [bq, bk] scores, then probabilities
  float* acc;     // [bq, hd] unnormalised output rows
  float* m;       // [bq] row maxima
  float* l;       // [bq] row sums
  float* k_rhs;   // f32: [hd, bk] the key block transposed; bf16: its pairs
  float* q_lhs;   // bf16 only: Q's rows for the dot path
  float* v_buf;   // bf16 only: widened V [bk, hd]
};
ForwardScratch forward_scratch(float* base, const FlashAttentionShape& s, bool bf16) {
  const int64_t bq = block_q(s), bk = block_k(s), hd = s.head_dim;
  ForwardScratch w{};
  w.S = base;
  w.acc = w.S + bq * bk;
  w.m = w.acc + bq * hd;
  w.l = w.m + bq;
  w.k_rhs = w.l + bq;
  w.q_lhs = bf16 ? w.k_rhs + flash_dots::pairs_floats(bk, hd) : nullptr;
  w.v_buf = bf16 ? w.q_lhs + flash_dots::rows_floats(bq, hd) : nullptr;
  return w;
}

// Rows with a visible key: out = acc / l and lse = m + log l; rows with none: out 0 and lse -inf.
template <class T>
void store_forward_rows(const FlashAttentionShape& s, const ForwardScratch& w, int64_t rows, float* lse_rows,
                        T* out_rows) {
  const int64_t hd = s.head_dim;
  for (int64_t r = 0; r < rows; ++r) {
    float* arow = w.acc + r * hd;
    if (w.l[r] > 0.0f) {
      const float inv = 1.0f / w.l[r];
#pragma omp simd
      for (int64_t d = 0; d < hd; ++d) arow[d] *= inv;
      lse_rows[r] = w.m[r] + std::log(w.l[r]);
    } else {
      std::fill(arow, arow + hd, 0.0f);
      lse_rows[r] = kNegInf;
    }
    store_row(arow, out_rows + r * s.ld_o, hd);
  }
}

// The run-time paths: the element-wise rows' and the bf16 score products'.
struct Paths {
  VectorIsa isa;
  flash_dots::DotIsa dot;
};

// One forward task: query block qb of head h in batch b, over every key block its rows see.
template <class T>
void forward_task(const T* q, const T* k, const T* v, T* out, float* lse, const FlashAttentionShape& s, int64_t b,
                  int64_t h, int64_t qb, Paths paths, const ForwardScratch& w) {
  const int64_t hd = s.head_dim, group = s.q_heads / s.kv_heads, g = h / group;
  const int64_t bq = block_q(s), bk = block_k(s);
  const int64_t i0 = qb * bq, rows = std::min(bq, s.q_len - i0);
  const Block qh = prepare_lhs(paths.dot, q + (b * s.q_len + i0) * s.ld_q + h * hd, s.ld_q, rows, hd, w.q_lhs);
  const T* kg = k + b * s.kv_len * s.ld_k + g * hd;
  const T* vg = v + b * s.kv_len * s.ld_v + g * hd;
  std::fill(w.acc, w.acc + rows * hd, 0.0f);
  std::fill(w.m, w.m + rows, kNegInf);
  std::fill(w.l, w.l + rows, 0.0f);
  const int64_t p_first = s.q_offset + i0, p_last = p_first + rows - 1;
  const int64_t j_begin = key_lo(s, p_first), j_end = key_hi(s, p_last);
  for (int64_t kb = j_begin; kb < j_end; kb += bk) {
    const int64_t cols = std::min(bk, j_end - kb);
    const ScoreRhs kt = prepare_rhs(kg + kb * s.ld_k, s.ld_k, cols, hd, w.k_rhs, bk);
    score_product<T>(paths.dot, qh, kt, rows, cols, hd, bk, s.scale, w.S);
    flash_rows::softmax_update(paths.isa, s, {p_first, rows, kb, cols, bk}, w.S, w.m, w.l, w.acc, hd);
    const Block vt = load_block(vg + kb * s.ld_v, s.ld_v, cols, hd, w.v_buf);
    single_gemm(false, false, rows, hd, cols, 1.0f, w.S, bk, vt.p, vt.ld, 1.0f, w.acc, hd);
  }
  store_forward_rows(s, w, rows, lse + (b * s.q_heads + h) * s.q_len + i0, out + (b * s.q_len + i0) * s.ld_o + h * hd);
}

Paths run_paths() { return {best_vector_isa(), flash_dots::best_dot_isa()}; }

template <class T>
void forward(const T* q, const T* k, const T* v, T* out, float* lse, const FlashAttentionShape& s, float* workspace,
             int threads) {
  constexpr bool kBf16 = std::is_same_v<T, std::uint16_t>;
  check_shape("flash_attention_forward", s);
  const int64_t hd = s.head_dim;
  const int64_t bq = block_q(s);
  const int64_t q_blocks = (s.q_len + bq - 1) / bq;
  const int64_t tasks = s.batch * s.q_heads * q_blocks;
  const int64_t scratch = per_thread_floats(s, kBf16);
  const bool parallel = tasks > 1 && detail::worth_parallel(s.q_len * s.kv_len * hd * s.batch * s.q_heads / 2);
  const Paths paths = run_paths();
#pragma omp parallel num_threads(std::max(threads, 1)) if (parallel)
  {
    const ForwardScratch w = forward_scratch(workspace + omp_get_thread_num() * scratch, s, kBf16);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t qb = task % q_blocks, h = (task / q_blocks) % s.q_heads, b = task / (q_blocks * s.q_heads);
      forward_task(q, k, v, out, lse, s, b, h, qb, paths, w);
    }
  }
}

// The backward's per-thread scratch, laid out as per_thread_floats counts it; the bf16-only parts are null for f32.
struct BackwardScratch {
  float* P;       // [bq, bk] recomputed probabilities
  float* dP;      // [bq, bk] dP, then dS in place
  float* D;       // [group, task rows] rowsum(dO * O) of the task's rows, once per row
  float* dk_acc;  // [bk, hd] the key block's dK, summed over the chunks
  float* dv_acc;  // [bk, hd] the key block's dV
  float* dk_chunk;  // [bk, hd] one chunk's dK of the key block, summed over the group's heads
  float* dv_chunk;  // [bk, hd] its dV
  float* k_rhs;   // f32: [hd, bk] K^T; bf16: K's pairs
  float* v_rhs;   // f32: [hd, bk] V^T; bf16: V's pairs
  float* k_buf;   // bf16 only: widened K [bk, hd]
  float* q_lhs;   // bf16 only: Q's and dO's rows for the dot path
  float* do_lhs;
  float* q_buf;   // bf16 only: widened Q and dO [bq, hd]
  float* do_buf;
  float* dq_buf;   // bf16 only: [group, task rows, hd], the task's dQ in f32 until it ends
  float* row_buf;  // bf16 only: [2, hd], widened rows
};
BackwardScratch backward_scratch(float* base, const FlashAttentionShape& s, bool bf16) {
  const int64_t bq = block_q(s), bk = block_k(s), hd = s.head_dim, group = s.q_heads / s.kv_heads;
  const int64_t chunk = s.q_len;  // as per_thread_floats
  const int64_t rhs = bf16 ? flash_dots::pairs_floats(bk, hd) : hd * bk, lhs = flash_dots::rows_floats(bq, hd);
  BackwardScratch w{};
  w.P = base;
  w.dP = w.P + bq * bk;
  w.D = w.dP + bq * bk;
  w.dk_acc = w.D + group * chunk;
  w.dv_acc = w.dk_acc + bk * hd;
  w.dk_chunk = w.dv_acc + bk * hd;
  w.dv_chunk = w.dk_chunk + bk * hd;
  w.k_rhs = w.dv_chunk + bk * hd;
  w.v_rhs = w.k_rhs + rhs;
  if (!bf16) return w;
  w.k_buf = w.v_rhs + rhs;
  w.q_lhs = w.k_buf + bk * hd;
  w.do_lhs = w.q_lhs + lhs;
  w.q_buf = w.do_lhs + lhs;
  w.do_buf = w.q_buf + bq * hd;
  w.dq_buf = w.do_buf + bq * hd;
  w.row_buf = w.dq_buf + group * chunk * hd;
  return w;
}

// One backward task: kv group g of batch b over the query rows [lo, hi) (every chunk, or one); the group's dQ rows
// there have this single writer, and its dK and dV sums go to the tensors (every chunk) or to the chunk's partials.
struct BackwardTask {
  int64_t b, g, lo, hi;
  float* dk_part;  // [kv_len, hd] each, or null: straight into dk and dv
  float* dv_part;
};

// D = rowsum(dO * O) of the chunk's rows of every head of the group, once per row (the dot over widened rows for
// bf16: the same bits).
template <class T>
void chunk_output_dots(const T* out, const T* dout, const FlashAttentionShape& s, const BackwardTask& t,
                       VectorIsa isa, const BackwardScratch& w) {
  const int64_t hd = s.head_dim, group = s.q_heads / s.kv_heads, rows = t.hi - t.lo;
  for (int64_t hh = 0; hh < group; ++hh) {
    const int64_t at = (t.b * s.q_len + t.lo) * s.ld_o + (t.g * group + hh) * hd;
    float* D = w.D + hh * rows;
    if constexpr (std::is_same_v<T, std::uint16_t>) {
      for (int64_t i = 0; i < rows; ++i) {
        cast_bf16_to_f32_serial(out + at + i * s.ld_o, w.row_buf, hd);
        cast_bf16_to_f32_serial(dout + at + i * s.ld_o, w.row_buf + hd, hd);
        flash_rows::output_dots(isa, w.row_buf, hd, w.row_buf + hd, hd, 1, hd, D + i);
      }
    } else {
      flash_rows::output_dots(isa, out + at, s.ld_o, dout + at, s.ld_o, rows, hd, D);
    }
  }
}

// The chunk's dQ rows before the key blocks add into them: zeroed, or (accumulate) kept; for bf16 the f32 copies in
// dq_buf, widened from the tensor when accumulating.
template <class T>
void start_chunk_dq(T* dq, const FlashAttentionShape& s, const BackwardTask& t, bool accumulate,
                    const BackwardScratch& w) {
  const int64_t hd = s.head_dim, group = s.q_heads / s.kv_heads, rows = t.hi - t.lo;
  for (int64_t hh = 0; hh < group; ++hh) {
    T* dq_rows = dq + (t.b * s.q_len + t.lo) * s.ld_q + (t.g * group + hh) * hd;
    for (int64_t i = 0; i < rows; ++i) {
      if constexpr (std::is_same_v<T, std::uint16_t>) {
        float* acc_row = w.dq_buf + (hh * rows + i) * hd;
        if (accumulate) {
          cast_bf16_to_f32_serial(dq_rows + i * s.ld_q, acc_row, hd);
        } else {
          std::fill_n(acc_row, hd, 0.0f);
        }
      } else if (!accumulate) {
        std::fill_n(dq_rows + i * s.ld_q, hd, 0.0f);
      }
    }
  }
}

// bf16: the chunk's f32 dQ narrowed into the tensor once, as the task ends.
void finish_chunk_dq(std::uint16_t* dq, const FlashAttentionShape& s, const BackwardTask& t,
                     const BackwardScratch& w) {
  const int64_t hd = s.head_dim, group = s.q_heads / s.kv_heads, rows = t.hi - t.lo;
  for (int64_t hh = 0; hh < group; ++hh) {
    for (int64_t i = 0; i < rows; ++i) {
      cast_f32_to_bf16_serial(w.dq_buf + (hh * rows + i) * hd,
                              dq + (t.b * s.q_len + t.lo + i) * s.ld_q + (t.g * group + hh) * hd, hd);
    }
  }
}
void finish_chunk_dq(float*, const FlashAttentionShape&, const BackwardTask&, const BackwardScratch&) {}

// One key block [kb, kb + cols) of kv group g as the query heads see it: its K (f32, for dQ) and K / V as score
// products' right-hand sides, and the chunk's query rows [i_begin, i_end) that see at least one of its keys.
struct KeyBlock {
  int64_t kb, cols;
  Block kt;
  ScoreRhs k_rhs, v_rhs;
  int64_t i_begin, i_end;
};

// Query head h's share of a key block: per query block the four GEMMs (two score products on bf16), into dK and dV's
// block sums and dQ's rows.
template <class T>
void backward_head_on_key_block(const T* q, const float* lse, const T* dout, T* dq, const FlashAttentionShape& s,
                                const BackwardTask& t, int64_t h, const KeyBlock& kblk, Paths paths,
                                const BackwardScratch& w) {
  const int64_t hd = s.head_dim, group = s.q_heads / s.kv_heads, hh = h - t.g * group, chunk = t.hi - t.lo;
  const int64_t bq = block_q(s), bk = block_k(s), cols = kblk.cols;
  const T* qh = q + t.b * s.q_len * s.ld_q + h * hd;
  const T* doh = dout + t.b * s.q_len * s.ld_o + h * hd;
  float* dqh = nullptr;  // this head's dQ row t.lo in f32: the tensor itself, or the task's dq_buf
  int64_t ld_dq = 0;
  if constexpr (std::is_same_v<T, std::uint16_t>) {
    dqh = w.dq_buf + hh * chunk * hd;
    ld_dq = hd;
  } else {
    dqh = dq + (t.b * s.q_len + t.lo) * s.ld_q + h * hd;
    ld_dq = s.ld_q;
  }
  const float* lse_h = lse + (t.b * s.q_heads + h) * s.q_len;
  for (int64_t i0 = kblk.i_begin; i0 < kblk.i_end; i0 += bq) {
    const int64_t rows = std::min(bq, kblk.i_end - i0);
    const Block qs = prepare_lhs(paths.dot, qh + i0 * s.ld_q, s.ld_q, rows, hd, w.q_lhs);
    const Block dos = prepare_lhs(paths.dot, doh + i0 * s.ld_o, s.ld_o, rows, hd, w.do_lhs);
    const Block qi = load_block(qh + i0 * s.ld_q, s.ld_q, rows, hd, w.q_buf);
    const Block doi = load_block(doh + i0 * s.ld_o, s.ld_o, rows, hd, w.do_buf);
    score_product<T>(paths.dot, qs, kblk.k_rhs, rows, cols, hd, bk, s.scale, w.P);
    flash_rows::probabilities(paths.isa, s, {s.q_offset + i0, rows, kblk.kb, cols, bk}, lse_h + i0, w.P);
    single_gemm(true, false, cols, hd, rows, 1.0f, w.P, bk, doi.p, doi.ld, 1.0f, w.dv_chunk, hd);
    score_product<T>(paths.dot, dos, kblk.v_rhs, rows, cols, hd, bk, 1.0f, w.dP);
    flash_rows::scores_grad(paths.isa, w.P, w.D + hh * chunk + (i0 - t.lo), rows, cols, bk, s.scale, w.dP);
    single_gemm(false, false, rows, hd, cols, 1.0f, w.dP, bk, kblk.kt.p, kblk.kt.ld, 1.0f,
                dqh + (i0 - t.lo) * ld_dq, ld_dq);
    single_gemm(true, false, cols, hd, rows, 1.0f, w.dP, bk, qi.p, qi.ld, 1.0f, w.dk_chunk, hd);
  }
}

// `add` into dst's row of hd values: stored, or (accumulate) added to what it holds; bf16 as the f32 path's
// `dst += add` on the widened row, narrowed once.
void store_grad_row(const float* add, float* dst, int64_t hd, bool accumulate, float*) {
  if (!accumulate) {
    store_row(add, dst, hd);
    return;
  }
#pragma omp simd
  for (int64_t d = 0; d < hd; ++d) dst[d] += add[d];
}
void store_grad_row(const float* add, std::uint16_t* dst, int64_t hd, bool accumulate, float* row) {
  if (!accumulate) {
    cast_f32_to_bf16_serial(add, dst, hd);
    return;
  }
  cast_bf16_to_f32_serial(dst, row, hd);
#pragma omp simd
  for (int64_t d = 0; d < hd; ++d) row[d] += add[d];
  cast_f32_to_bf16_serial(row, dst, hd);
}

// The key block's summed dK and dV rows: into the tensors (every chunk), or into the chunk's partials.
template <class T>
void store_key_block_grads(T* dk, T* dv, const FlashAttentionShape& s, const BackwardTask& t, int64_t kb,
                           int64_t cols, bool accumulate, const BackwardScratch& w) {
  const int64_t hd = s.head_dim;
  if (t.dk_part != nullptr) {
    std::memcpy(t.dk_part + kb * hd, w.dk_acc, cols * hd * sizeof(float));
    std::memcpy(t.dv_part + kb * hd, w.dv_acc, cols * hd * sizeof(float));
    return;
  }
  for (int64_t j = 0; j < cols; ++j) {
    store_grad_row(w.dk_acc + j * hd, dk + (t.b * s.kv_len + kb + j) * s.ld_k + t.g * hd, hd, accumulate, w.row_buf);
    store_grad_row(w.dv_acc + j * hd, dv + (t.b * s.kv_len + kb + j) * s.ld_v + t.g * hd, hd, accumulate, w.row_buf);
  }
}

template <class T>
void backward_task(const T* q, const T* k, const T* v, const T* out, const float* lse, const T* dout, T* dq, T* dk,
                   T* dv, const FlashAttentionShape& s, bool accumulate, const BackwardTask& t, Paths paths,
                   const BackwardScratch& w) {
  const int64_t hd = s.head_dim, group = s.q_heads / s.kv_heads, bk = block_k(s);
  const T* kg = k + t.b * s.kv_len * s.ld_k + t.g * hd;
  const T* vg = v + t.b * s.kv_len * s.ld_v + t.g * hd;
  chunk_output_dots(out, dout, s, t, paths.isa, w);
  start_chunk_dq(dq, s, t, accumulate, w);
  const int64_t rows_per_chunk = chunk_rows(s);
  for (int64_t kb = 0; kb < s.kv_len; kb += bk) {
    KeyBlock kblk{kb, std::min(bk, s.kv_len - kb), {nullptr, 0}, {nullptr}, {nullptr}, 0, 0};
    std::fill(w.dk_acc, w.dk_acc + kblk.cols * hd, 0.0f);
    std::fill(w.dv_acc, w.dv_acc + kblk.cols * hd, 0.0f);
    int64_t i_begin = 0, i_end = 0;
    query_range(s, kb, kb + kblk.cols, i_begin, i_end);
    if (std::max(i_begin, t.lo) < std::min(i_end, t.hi)) {
      kblk.kt = load_block(kg + kb * s.ld_k, s.ld_k, kblk.cols, hd, w.k_buf);
      kblk.k_rhs = prepare_rhs(kg + kb * s.ld_k, s.ld_k, kblk.cols, hd, w.k_rhs, bk);
      kblk.v_rhs = prepare_rhs(vg + kb * s.ld_v, s.ld_v, kblk.cols, hd, w.v_rhs, bk);
    }
    // Every chunk of the task, whether it sees the key block or not: each adds its sum (zeros or not) in turn.
    for (int64_t c0 = t.lo; c0 < t.hi; c0 += rows_per_chunk) {
      std::fill(w.dk_chunk, w.dk_chunk + kblk.cols * hd, 0.0f);
      std::fill(w.dv_chunk, w.dv_chunk + kblk.cols * hd, 0.0f);
      kblk.i_begin = std::max(i_begin, c0);
      kblk.i_end = std::min({i_end, c0 + rows_per_chunk, t.hi});
      if (kblk.i_begin < kblk.i_end) {
        for (int64_t h = t.g * group; h < (t.g + 1) * group; ++h) {
          backward_head_on_key_block(q, lse, dout, dq, s, t, h, kblk, paths, w);
        }
      }
#pragma omp simd
      for (int64_t x = 0; x < kblk.cols * hd; ++x) {
        w.dk_acc[x] += w.dk_chunk[x];
        w.dv_acc[x] += w.dv_chunk[x];
      }
    }
    store_key_block_grads(dk, dv, s, t, kb, kblk.cols, accumulate, w);
  }
  finish_chunk_dq(dq, s, t, w);
}

// chunk_tasks: key row j of group g in batch b gets the chunks' partial sums added in chunk order from zero, then
// stored (or added to the tensor's row): backward_task's own additions when it takes every chunk.
template <class T>
void reduce_partials(T* dk, T* dv, const FlashAttentionShape& s, bool accumulate, const float* partials,
                     int64_t chunks, int threads, float* rows) {
  const int64_t hd = s.head_dim, n = s.batch * s.kv_heads * s.kv_len;
  const int64_t part = 2 * s.kv_len * hd;  // one chunk's dK and dV
#pragma omp parallel for num_threads(std::max(threads, 1)) schedule(static) if (detail::worth_parallel(n * hd))
  for (int64_t row = 0; row < n; ++row) {
    const int64_t j = row % s.kv_len, g = (row / s.kv_len) % s.kv_heads, b = row / (s.kv_len * s.kv_heads);
    float* sum = rows + omp_get_thread_num() * 3 * hd;  // the dK and dV rows, and a widened one
    const float* first = partials + (b * s.kv_heads + g) * chunks * part + j * hd;
    std::fill_n(sum, 2 * hd, 0.0f);  // from zero, as backward_task's dk_acc
    for (int64_t c = 0; c < chunks; ++c) {
      const float* p = first + c * part;
#pragma omp simd
      for (int64_t d = 0; d < hd; ++d) {
        sum[d] += p[d];
        sum[hd + d] += p[s.kv_len * hd + d];
      }
    }
    store_grad_row(sum, dk + (b * s.kv_len + j) * s.ld_k + g * hd, hd, accumulate, sum + hd + hd);
    store_grad_row(sum + hd, dv + (b * s.kv_len + j) * s.ld_v + g * hd, hd, accumulate, sum + hd + hd);
  }
}

template <class T>
void backward(const T* q, const T* k, const T* v, const T* out, const float* lse, const T* dout, T* dq, T* dk, T* dv,
              const FlashAttentionShape& s, bool accumulate, float* workspace, int threads) {
  constexpr bool kBf16 = std::is_same_v<T, std::uint16_t>;
  check_shape("flash_attention_backward", s);
  const int team = std::max(threads, 1);
  const bool per_chunk = chunk_tasks(s, team);
  const int64_t chunks = per_chunk ? q_chunks(s) : 1, rows_per_chunk = per_chunk ? chunk_rows(s) : s.q_len;
  const int64_t tasks = s.batch * s.kv_heads * chunks;
  const int64_t scratch = per_thread_floats(s, kBf16);
  float* partials = workspace + team * scratch;
  const bool parallel =
      tasks > 1 && detail::worth_parallel(s.q_len * s.kv_len * s.head_dim * s.batch * s.q_heads / 2);
  const Paths paths = run_paths();
#pragma omp parallel num_threads(team) if (parallel)
  {
    const BackwardScratch w = backward_scratch(workspace + omp_get_thread_num() * scratch, s, kBf16);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      // The last chunk first: under a causal mask it sees the most keys.
      const int64_t c = chunks - 1 - task % chunks, bg = task / chunks;
      const int64_t part = 2 * s.kv_len * s.head_dim;
      float* dk_part = per_chunk ? partials + (bg * chunks + c) * part : nullptr;
      const BackwardTask t{bg / s.kv_heads, bg % s.kv_heads, c * rows_per_chunk,
                           std::min(s.q_len, (c + 1) * rows_per_chunk), dk_part,
                           dk_part != nullptr ? dk_part + s.kv_len * s.head_dim : nullptr};
      backward_task(q, k, v, out, lse, dout, dq, dk, dv, s, accumulate, t, paths, w);
    }
  }
  // Each thread's reduction rows in the head of its scratch (the backward is done with it).
  if (per_chunk) reduce_partials(dk, dv, s, accumulate, partials, chunks, team, workspace);
}

}  // namespace

std::size_t flash_attention_workspace_floats(const FlashAttentionShape& shape, int threads, bool bf16) {
  const int team = std::max(threads, 1);
  return static_cast<std::size_t>(team * per_thread_floats(shape, bf16) + partial_floats(shape, team));
}

void flash_attention_forward(const float* q, const float* k, const float* v, float* out, float* lse,
                             const FlashAttentionShape& s, float* workspace, int threads) {
  forward(q, k, v, out, lse, s, workspace, threads);
}

void flash_attention_forward(const std::uint16_t* q, const std::uint16_t* k, const std::uint16_t* v,
                             std::uint16_t* out, float* lse, const FlashAttentionShape& s, float* workspace,
                             int threads) {
  forward(q, k, v, out, lse, s, workspace, threads);
}

void flash_attention_backward(const float* q, const float* k, const float* v, const float* out, const float* lse,
                              const float* dout, float* dq, float* dk, float* dv, const FlashAttentionShape& s,
                              bool accumulate, float* workspace, int threads) {
  backward(q, k, v, out, lse, dout, dq, dk, dv, s, accumulate, workspace, threads);
}

void flash_attention_backward(const std::uint16_t* q, const std::uint16_t* k, const std::uint16_t* v,
                              const std::uint16_t* out, const float* lse, const std::uint16_t* dout, std::uint16_t* dq,
                              std::uint16_t* dk, std::uint16_t* dv, const FlashAttentionShape& s, bool accumulate,
                              float* workspace, int threads) {
  backward(q, k, v, out, lse, dout, dq, dk, dv, s, accumulate, workspace, threads);
}

void attention_merge(const float* out_a, const float* lse_a, const float* out_b, const float* lse_b, float* out,
                     float* lse, int64_t batch, int64_t len, int64_t heads, int64_t head_dim) {
  const int64_t n_rows = batch * heads * len;
  CLEAVE_PARALLEL_FOR(row, n_rows, detail::worth_parallel(n_rows * head_dim),
    const int64_t t = row % len, h = (row / len) % heads, b = row / (len * heads);
    const int64_t at = (b * len + t) * heads * head_dim + h * head_dim;
    const float la = lse_a[row], lb = lse_b[row];
    const float mx = std::max(la, lb);
    if (mx == kNegInf) {
      std::fill_n(out + at, head_dim, 0.0f);
      lse[row] = kNegInf;
      continue;
    }
    const float l = mx + std::log(std::exp(la - mx) + std::exp(lb - mx));
    const float wa = std::exp(la - l), wb = std::exp(lb - l);
    for (int64_t d = 0; d < head_dim; ++d) out[at + d] = wa * out_a[at + d] + wb * out_b[at + d];
    lse[row] = l;)
}

}  // namespace cleave::kernels::cpu
