// FlashAttention-2 on the CPU, the backward (see flash_attention.hpp; the math is in docs/ops.md "Attention"; the
// forward is flash_attention.cpp, the helpers both share flash_attention_blocks.hpp).
//
// One task per (batch, kv head): D = rowsum(dO * O) once per row, then per key block and query block it recomputes
// P = exp(S - lse) and runs the four GEMMs dV += P^T dO, dP = dO V^T, dQ += dS K, dK += dS^T Q with
// dS = P (dP - D) scale; a key block's dK and dV sum, chunk by query chunk (chunk_rows), the chunk's sum over the
// group's query heads, and dQ rows have a single writer. Where the groups leave threads idle, one task per chunk
// (chunk_tasks) with the same additions. Masked entries of P and dS are written as exact zeros (exp_vec never
// returns 0).
//
// Invariant: the same additions in the same order whatever the task split, so the bits depend neither on the thread
// count nor on how the batch and the heads are split (tensor or all-to-all context parallelism).
//
// bf16 operands: written once over the element type. The score products (Q K^T, dO V^T) run on the bf16 dot path
// (flash_attention_dots.hpp: key / value pairs packed once per key block); the value products (P^T dO, dS K, dS^T Q)
// on P and dS rounded to bf16 (the f32 P and dS feed dS and nothing else), as paths.value says: on the dot path (P
// and dS rounded as they are packed, K's pairs of rows packed once per key block, Q's and dO's per query block) or
// on the f32 GEMM (P and dS rounded in place, K widened once per key block, Q and dO per query block); the
// chunk's dQ is summed in f32 over the key blocks in the thread's scratch and narrowed once when the task ends, dK
// and dV per key block (added to the widened old row when accumulating).
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/cpu/cast.hpp"
#include "kernels/cpu/flash_attention.hpp"
#include "kernels/cpu/flash_attention_blocks.hpp"
#include "kernels/cpu/flash_attention_rows.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/vector_isa.hpp"

namespace cleave::kernels::cpu {
namespace {

using namespace flash_blocks;

// Query rows [lo, hi) that see at least one key of [kb, ke).
void query_range(const FlashAttentionShape& s, int64_t kb, int64_t ke, int64_t& lo, int64_t& hi) {
  lo = s.causal ? std::clamp<int64_t>(s.k_offset + kb - s.q_offset, 0, s.q_len) : 0;
  hi = s.window > 0 ? std::clamp<int64_t>(s.k_offset + ke - 1 + s.window - s.q_offset, 0, s.q_len) : s.q_len;
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
  float* q_lhs;     // bf16 only: Q's and dO's rows for the score products
  float* do_lhs;
  // bf16 only, the value region (flash_attention_blocks.hpp): on the dot path K's pairs along the keys (dS K), Q's
  // and dO's pairs along the queries (dS^T Q, P^T dO), dS rounded, and P^T then dS^T rounded; on the GEMM path K
  // widened [bk, hd] (k_pairs), Q and dO widened [bq, hd] (q_pairs, do_pairs).
  float* k_pairs;
  float* q_pairs;
  float* do_pairs;
  float* ds_lhs;
  float* t_lhs;
  float* dq_buf;   // bf16 only: [group, task rows, hd], the task's dQ in f32 until it ends
  float* row_buf;  // bf16 only: [2, hd], widened rows
};
BackwardScratch backward_scratch(float* base, const FlashAttentionShape& s, bool bf16, flash_dots::ValueProducts value) {
  const int64_t bq = block_q(s), bk = block_k(s), hd = s.head_dim, group = s.q_heads / s.kv_heads;
  const int64_t chunk = s.q_len;  // as per_thread_floats
  const int64_t rhs = bf16 ? flash_dots::pairs_floats(bk, hd) : hd * bk, lhs = flash_dots::rows_floats(bq, hd);
  const int64_t query_pairs = flash_dots::pairs_floats(hd, bq);
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
  w.q_lhs = w.v_rhs + rhs;
  w.do_lhs = w.q_lhs + lhs;
  w.k_pairs = w.do_lhs + lhs;
  if (value == flash_dots::ValueProducts::kDots) {
    w.q_pairs = w.k_pairs + flash_dots::pairs_floats(hd, bk);
    w.do_pairs = w.q_pairs + query_pairs;
    w.ds_lhs = w.do_pairs + query_pairs;
    w.t_lhs = w.ds_lhs + flash_dots::rounded_floats(bq, bk);
  } else {
    w.q_pairs = w.k_pairs + bk * hd;
    w.do_pairs = w.q_pairs + bq * hd;
  }
  w.dq_buf = w.k_pairs + backward_value_floats(s);
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
    cast_f32_to_bf16_rows_serial(w.dq_buf + hh * rows * hd, hd,
                                 dq + (t.b * s.q_len + t.lo) * s.ld_q + (t.g * group + hh) * hd, s.ld_q, rows, hd);
  }
}
void finish_chunk_dq(float*, const FlashAttentionShape&, const BackwardTask&, const BackwardScratch&) {}

// One key block [kb, kb + cols) of kv group g as the query heads see it: its K for dQ (f32: in place; bf16: its
// pairs along the keys) and K / V as score products' right-hand sides, and the chunk's query rows [i_begin, i_end)
// that see at least one of its keys.
struct KeyBlock {
  int64_t kb, cols;
  Block kt;
  ScoreRhs k_rhs, v_rhs;
  int64_t i_begin, i_end;
};

// Query head h's share of a key block: per query block the four GEMMs (two score products on bf16), into dK and dV's
// block sums and dQ's rows.
// The bf16 GEMM path's value products of one query block (P and dS already rounded in place): dV += P^T dO,
// dQ += dS K, dK += dS^T Q on the f32 block GEMM, Q and dO widened (K is, once per key block).
void gemm_value_products(const std::uint16_t* q, const std::uint16_t* d_o, const FlashAttentionShape& s, int64_t rows,
                         int64_t cols, const Block& k, float* dq_rows, int64_t ld_dq, const BackwardScratch& w) {
  const int64_t hd = s.head_dim, bk = block_k(s);
  const Block doi = widen_block(d_o, s.ld_o, rows, hd, w.do_pairs);
  const Block qi = widen_block(q, s.ld_q, rows, hd, w.q_pairs);
  single_gemm(true, false, cols, hd, rows, 1.0f, w.P, bk, doi.p, doi.ld, 1.0f, w.dv_chunk, hd);
  single_gemm(false, false, rows, hd, cols, 1.0f, w.dP, bk, k.p, k.ld, 1.0f, dq_rows, ld_dq);
  single_gemm(true, false, cols, hd, rows, 1.0f, w.dP, bk, qi.p, qi.ld, 1.0f, w.dk_chunk, hd);
}

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
    score_product<T>(paths.dot, qs, kblk.k_rhs, rows, cols, hd, bk, s.scale, w.P);
    flash_rows::probabilities(paths.isa, s, {s.q_offset + i0, rows, kblk.kb, cols, bk}, lse_h + i0, w.P);
    score_product<T>(paths.dot, dos, kblk.v_rhs, rows, cols, hd, bk, 1.0f, w.dP);
    const float* D = w.D + hh * chunk + (i0 - t.lo);
    const bool gemm_values = std::is_same_v<T, std::uint16_t> && paths.value == flash_dots::ValueProducts::kGemm;
    if (!std::is_same_v<T, std::uint16_t> && s.round_probabilities) {
      flash_dots::scores_grad_rounded(paths.dot, w.P, D, rows, cols, bk, s.scale, w.dP);  // P and dS as bf16 rounds
    } else if (!gemm_values) {
      flash_rows::scores_grad(paths.isa, w.P, D, rows, cols, bk, s.scale, w.dP);
    }
    float* dq_rows = dqh + (i0 - t.lo) * ld_dq;
    if constexpr (std::is_same_v<T, std::uint16_t>) {
      if (gemm_values) {
        flash_dots::scores_grad_rounded(paths.dot, w.P, D, rows, cols, bk, s.scale, w.dP);
        gemm_value_products(qh + i0 * s.ld_q, doh + i0 * s.ld_o, s, rows, cols, kblk.kt, dq_rows, ld_dq, w);
        continue;
      }
      // P and dS rounded to bf16 (flash_attention_dots.hpp), each once per operand layout.
      using flash_dots::products;
      flash_dots::pack_pairs_of_rows(paths.dot, doh + i0 * s.ld_o, s.ld_o, rows, hd, w.do_pairs);
      flash_dots::pack_pairs_of_rows(paths.dot, qh + i0 * s.ld_q, s.ld_q, rows, hd, w.q_pairs);
      products(paths.dot, flash_dots::pack_columns_rounded(paths.dot, w.P, bk, rows, cols, w.t_lhs), cols,
               w.do_pairs, hd, rows, w.dv_chunk, hd);
      products(paths.dot, flash_dots::pack_rows_rounded(paths.dot, w.dP, bk, rows, cols, w.ds_lhs), rows,
               kblk.kt.p, hd, cols, dq_rows, ld_dq);
      products(paths.dot, flash_dots::pack_columns_rounded(paths.dot, w.dP, bk, rows, cols, w.t_lhs), cols,
               w.q_pairs, hd, rows, w.dk_chunk, hd);
    } else {
      single_gemm(true, false, cols, hd, rows, 1.0f, w.P, bk, doh + i0 * s.ld_o, s.ld_o, 1.0f, w.dv_chunk, hd);
      single_gemm(false, false, rows, hd, cols, 1.0f, w.dP, bk, kblk.kt.p, kblk.kt.ld, 1.0f, dq_rows, ld_dq);
      single_gemm(true, false, cols, hd, rows, 1.0f, w.dP, bk, qh + i0 * s.ld_q, s.ld_q, 1.0f, w.dk_chunk, hd);
    }
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
  if (!accumulate) {
    store_rows(w.dk_acc, hd, dk + (t.b * s.kv_len + kb) * s.ld_k + t.g * hd, s.ld_k, cols, hd);
    store_rows(w.dv_acc, hd, dv + (t.b * s.kv_len + kb) * s.ld_v + t.g * hd, s.ld_v, cols, hd);
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
      if constexpr (std::is_same_v<T, std::uint16_t>) {
        if (paths.value == flash_dots::ValueProducts::kDots) {
          flash_dots::pack_pairs_of_rows(paths.dot, kg + kb * s.ld_k, s.ld_k, kblk.cols, hd, w.k_pairs);
          kblk.kt = {w.k_pairs, 0};
        } else {
          kblk.kt = widen_block(kg + kb * s.ld_k, s.ld_k, kblk.cols, hd, w.k_pairs);
        }
      } else {
        kblk.kt = {kg + kb * s.ld_k, s.ld_k};
      }
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
              const FlashAttentionShape& s, bool accumulate, float* workspace, int threads, FlashValuePath value_path) {
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
  const Paths paths = run_paths(value_path);
#pragma omp parallel num_threads(team) if (parallel)
  {
    const BackwardScratch w = backward_scratch(workspace + omp_get_thread_num() * scratch, s, kBf16, paths.value);
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

void flash_attention_backward(const float* q, const float* k, const float* v, const float* out, const float* lse,
                              const float* dout, float* dq, float* dk, float* dv, const FlashAttentionShape& s,
                              bool accumulate, float* workspace, int threads) {
  backward(q, k, v, out, lse, dout, dq, dk, dv, s, accumulate, workspace, threads, FlashValuePath::kAuto);
}

void flash_attention_backward(const std::uint16_t* q, const std::uint16_t* k, const std::uint16_t* v,
                              const std::uint16_t* out, const float* lse, const std::uint16_t* dout, std::uint16_t* dq,
                              std::uint16_t* dk, std::uint16_t* dv, const FlashAttentionShape& s, bool accumulate,
                              float* workspace, int threads, FlashValuePath value_path) {
  backward(q, k, v, out, lse, dout, dq, dk, dv, s, accumulate, workspace, threads, value_path);
}

}  // namespace cleave::kernels::cpu
