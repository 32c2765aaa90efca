// FlashAttention-2 on the CPU (see flash_attention.hpp; the math is in docs/ops.md "Attention").
//
// Forward, one task per (batch, query head, query block of kFlashBlockQ rows): S = scale * Q K^T over key
// blocks of kFlashBlockK (one small GEMM each), the online-softmax update of the row maxima m, sums l and the
// unnormalised accumulator, then acc += P V (GEMM). Backward, one task per (batch, kv head) so dK and dV of a
// key block are summed over the query heads of the group in one place and dQ rows of the group's heads have a
// single writer: per key block and query block it recomputes P = exp(S - lse) and runs the four GEMMs
// dV += P^T dO, dP = dO V^T, dQ += dS K, dK += dS^T Q with dS = P (dP - D) scale, D = rowsum(dO * O).
// Masked entries of P and dS are written as exact zeros (exp_vec never returns 0).
//
// bf16 operands: written once over the element type. Each block a GEMM reads is widened (exactly) into the
// thread's scratch as it is loaded, each output row narrowed as it is stored; the group's dQ is summed in f32 over
// the key blocks in the thread's scratch and narrowed once when the task ends, dK and dV per key block (added to
// the widened old row when accumulating). So every f32 operation is the f32 path's on the same values, and the bits
// are those of widening the whole tensors, the f32 kernel, and narrowing its outputs once.
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

// Forward: S [bq, bk], acc [bq, hd], m and l [bq], K^T [hd, bk]; backward: P and dS [bq, bk], D [bq], dK and dV
// [bk, hd], K^T and V^T [hd, bk].
// bf16 operands add the widened blocks: forward Q [bq, hd], K and V [bk, hd]; backward Q, dO and O [bq, hd], K and
// V [bk, hd], the group's dQ in f32 [group, q_len, hd] and one row [hd].
int64_t per_thread_floats(const FlashAttentionShape& s, bool bf16) {
  const int64_t bq = block_q(s), bk = block_k(s), hd = s.head_dim, group = s.q_heads / s.kv_heads;
  const int64_t forward = bq * bk + bq * hd + 2 * bq + hd * bk, backward = 2 * bq * bk + bq + 4 * bk * hd;
  if (!bf16) return std::max(forward, backward);
  return std::max(forward + bq * hd + 2 * bk * hd,
                  backward + 3 * bq * hd + 2 * bk * hd + group * s.q_len * hd + hd);
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

// The forward's per-thread scratch, laid out as per_thread_floats counts it; the widened blocks are null for f32.
struct ForwardScratch {
  float* S;      // [bq, bk] scores, then probabilities
  float* acc;    // [bq, hd] unnormalised output rows
  float* m;      // [bq] row maxima
  float* l;      // [bq] row sums
  float* kT;     // [hd, bk] the key block transposed
  float* q_buf;  // bf16 only: widened Q [bq, hd], K and V [bk, hd]
  float* k_buf;
  float* v_buf;
};
ForwardScratch forward_scratch(float* base, int64_t bq, int64_t bk, int64_t hd, bool widen) {
  ForwardScratch w{};
  w.S = base;
  w.acc = w.S + bq * bk;
  w.m = w.acc + bq * hd;
  w.l = w.m + bq;
  w.kT = w.l + bq;
  w.q_buf = widen ? w.kT + hd * bk : nullptr;
  w.k_buf = widen ? w.q_buf + bq * hd : nullptr;
  w.v_buf = widen ? w.k_buf + bk * hd : nullptr;
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

// One forward task: query block qb of head h in batch b, over every key block its rows see.
template <class T>
void forward_task(const T* q, const T* k, const T* v, T* out, float* lse, const FlashAttentionShape& s, int64_t b,
                  int64_t h, int64_t qb, VectorIsa isa, const ForwardScratch& w) {
  const int64_t hd = s.head_dim, group = s.q_heads / s.kv_heads, g = h / group;
  const int64_t bq = block_q(s), bk = block_k(s);
  const int64_t i0 = qb * bq, rows = std::min(bq, s.q_len - i0);
  const Block qh = load_block(q + (b * s.q_len + i0) * s.ld_q + h * hd, s.ld_q, rows, hd, w.q_buf);
  const T* kg = k + b * s.kv_len * s.ld_k + g * hd;
  const T* vg = v + b * s.kv_len * s.ld_v + g * hd;
  std::fill(w.acc, w.acc + rows * hd, 0.0f);
  std::fill(w.m, w.m + rows, kNegInf);
  std::fill(w.l, w.l + rows, 0.0f);
  const int64_t p_first = s.q_offset + i0, p_last = p_first + rows - 1;
  const int64_t j_begin = key_lo(s, p_first), j_end = key_hi(s, p_last);
  for (int64_t kb = j_begin; kb < j_end; kb += bk) {
    const int64_t cols = std::min(bk, j_end - kb);
    const Block kt = load_block(kg + kb * s.ld_k, s.ld_k, cols, hd, w.k_buf);
    transpose_block(kt.p, kt.ld, cols, hd, w.kT, bk);
    single_gemm(false, false, rows, cols, hd, s.scale, qh.p, qh.ld, w.kT, bk, 0.0f, w.S, bk);
    flash_rows::softmax_update(isa, s, {p_first, rows, kb, cols, bk}, w.S, w.m, w.l, w.acc, hd);
    const Block vt = load_block(vg + kb * s.ld_v, s.ld_v, cols, hd, w.v_buf);
    single_gemm(false, false, rows, hd, cols, 1.0f, w.S, bk, vt.p, vt.ld, 1.0f, w.acc, hd);
  }
  store_forward_rows(s, w, rows, lse + (b * s.q_heads + h) * s.q_len + i0, out + (b * s.q_len + i0) * s.ld_o + h * hd);
}

template <class T>
void forward(const T* q, const T* k, const T* v, T* out, float* lse, const FlashAttentionShape& s, float* workspace,
             int threads) {
  constexpr bool kWiden = std::is_same_v<T, std::uint16_t>;
  check_shape("flash_attention_forward", s);
  const int64_t hd = s.head_dim;
  const int64_t bq = block_q(s), bk = block_k(s);
  const int64_t q_blocks = (s.q_len + bq - 1) / bq;
  const int64_t tasks = s.batch * s.q_heads * q_blocks;
  const int64_t scratch = per_thread_floats(s, kWiden);
  const bool parallel = tasks > 1 && detail::worth_parallel(s.q_len * s.kv_len * hd * s.batch * s.q_heads / 2);
  const VectorIsa isa = best_vector_isa();
#pragma omp parallel num_threads(std::max(threads, 1)) if (parallel)
  {
    const ForwardScratch w = forward_scratch(workspace + omp_get_thread_num() * scratch, bq, bk, hd, kWiden);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t qb = task % q_blocks, h = (task / q_blocks) % s.q_heads, b = task / (q_blocks * s.q_heads);
      forward_task(q, k, v, out, lse, s, b, h, qb, isa, w);
    }
  }
}

// The backward's per-thread scratch, laid out as per_thread_floats counts it; the widened blocks are null for f32.
struct BackwardScratch {
  float* P;       // [bq, bk] recomputed probabilities
  float* dP;      // [bq, bk] dP, then dS in place
  float* D;       // [bq] rowsum(dO * O)
  float* dk_acc;  // [bk, hd] the key block's dK, summed over the group's heads
  float* dv_acc;  // [bk, hd] the key block's dV
  float* kT;      // [hd, bk] the key block transposed
  float* vT;      // [hd, bk] the value block transposed
  float* q_buf;   // bf16 only: widened Q, dO and O [bq, hd], K and V [bk, hd]
  float* do_buf;
  float* o_buf;
  float* k_buf;
  float* v_buf;
  float* dq_buf;   // bf16 only: [group, q_len, hd], the group's dQ in f32 until the task ends
  float* row_buf;  // bf16 only: [hd], one widened dK or dV row
};
BackwardScratch backward_scratch(float* base, const FlashAttentionShape& s, bool widen) {
  const int64_t bq = block_q(s), bk = block_k(s), hd = s.head_dim, group = s.q_heads / s.kv_heads;
  BackwardScratch w{};
  w.P = base;
  w.dP = w.P + bq * bk;
  w.D = w.dP + bq * bk;
  w.dk_acc = w.D + bq;
  w.dv_acc = w.dk_acc + bk * hd;
  w.kT = w.dv_acc + bk * hd;
  w.vT = w.kT + hd * bk;
  w.q_buf = widen ? w.vT + hd * bk : nullptr;
  w.do_buf = widen ? w.q_buf + bq * hd : nullptr;
  w.o_buf = widen ? w.do_buf + bq * hd : nullptr;
  w.k_buf = widen ? w.o_buf + bq * hd : nullptr;
  w.v_buf = widen ? w.k_buf + bk * hd : nullptr;
  w.dq_buf = widen ? w.v_buf + bk * hd : nullptr;
  w.row_buf = widen ? w.dq_buf + group * s.q_len * hd : nullptr;
  return w;
}

// The dQ rows of kv group g in batch b before the key blocks add into them: zeroed, or (accumulate) kept; for bf16
// the f32 copies in dq_buf, widened from the tensor when accumulating.
template <class T>
void start_group_dq(T* dq, const FlashAttentionShape& s, int64_t b, int64_t g, bool accumulate,
                    const BackwardScratch& w) {
  const int64_t hd = s.head_dim, group = s.q_heads / s.kv_heads;
  for (int64_t h = g * group; h < (g + 1) * group; ++h) {
    T* dq_rows = dq + b * s.q_len * s.ld_q + h * hd;
    for (int64_t i = 0; i < s.q_len; ++i) {
      if constexpr (std::is_same_v<T, std::uint16_t>) {
        float* acc_row = w.dq_buf + ((h - g * group) * s.q_len + i) * hd;
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

// bf16: the group's f32 dQ narrowed into the tensor once, as the task ends.
void finish_group_dq(std::uint16_t* dq, const FlashAttentionShape& s, int64_t b, int64_t g, const BackwardScratch& w) {
  const int64_t hd = s.head_dim, group = s.q_heads / s.kv_heads;
  for (int64_t h = g * group; h < (g + 1) * group; ++h) {
    for (int64_t i = 0; i < s.q_len; ++i) {
      cast_f32_to_bf16_serial(w.dq_buf + ((h - g * group) * s.q_len + i) * hd,
                              dq + (b * s.q_len + i) * s.ld_q + h * hd, hd);
    }
  }
}
void finish_group_dq(float*, const FlashAttentionShape&, int64_t, int64_t, const BackwardScratch&) {}

// One key block [kb, kb + cols) of kv group g as the query heads see it: its K and V blocks (f32) and the query
// rows [i_begin, i_end) that see at least one of its keys.
struct KeyBlock {
  int64_t kb, cols;
  Block kt, vt;
  int64_t i_begin, i_end;
};

// Query head h's share of a key block: per query block the four GEMMs, into dK and dV's block sums and dQ's rows.
template <class T>
void backward_head_on_key_block(const T* q, const T* out, const float* lse, const T* dout, T* dq,
                                const FlashAttentionShape& s, int64_t b, int64_t g, int64_t h, const KeyBlock& kblk,
                                VectorIsa isa, const BackwardScratch& w) {
  const int64_t hd = s.head_dim, group = s.q_heads / s.kv_heads;
  const int64_t bq = block_q(s), bk = block_k(s), cols = kblk.cols;
  const T* qh = q + b * s.q_len * s.ld_q + h * hd;
  const T* doh = dout + b * s.q_len * s.ld_o + h * hd;
  const T* oh = out + b * s.q_len * s.ld_o + h * hd;
  float* dqh = nullptr;  // this head's dQ rows in f32: the tensor itself, or the task's dq_buf
  int64_t ld_dq = 0;
  if constexpr (std::is_same_v<T, std::uint16_t>) {
    dqh = w.dq_buf + (h - g * group) * s.q_len * hd;
    ld_dq = hd;
  } else {
    dqh = dq + b * s.q_len * s.ld_q + h * hd;
    ld_dq = s.ld_q;
  }
  const float* lse_h = lse + (b * s.q_heads + h) * s.q_len;
  for (int64_t i0 = kblk.i_begin; i0 < kblk.i_end; i0 += bq) {
    const int64_t rows = std::min(bq, kblk.i_end - i0);
    const Block qi = load_block(qh + i0 * s.ld_q, s.ld_q, rows, hd, w.q_buf);
    const Block doi = load_block(doh + i0 * s.ld_o, s.ld_o, rows, hd, w.do_buf);
    const Block oi = load_block(oh + i0 * s.ld_o, s.ld_o, rows, hd, w.o_buf);
    // D = rowsum(dO * O), recomputed per block (rows x hd, against the block's 5 rows x cols x hd GEMMs).
    flash_rows::output_dots(isa, oi.p, oi.ld, doi.p, doi.ld, rows, hd, w.D);
    single_gemm(false, false, rows, cols, hd, s.scale, qi.p, qi.ld, w.kT, bk, 0.0f, w.P, bk);
    flash_rows::probabilities(isa, s, {s.q_offset + i0, rows, kblk.kb, cols, bk}, lse_h + i0, w.P);
    single_gemm(true, false, cols, hd, rows, 1.0f, w.P, bk, doi.p, doi.ld, 1.0f, w.dv_acc, hd);
    single_gemm(false, false, rows, cols, hd, 1.0f, doi.p, doi.ld, w.vT, bk, 0.0f, w.dP, bk);
    flash_rows::scores_grad(isa, w.P, w.D, rows, cols, bk, s.scale, w.dP);
    single_gemm(false, false, rows, hd, cols, 1.0f, w.dP, bk, kblk.kt.p, kblk.kt.ld, 1.0f, dqh + i0 * ld_dq, ld_dq);
    single_gemm(true, false, cols, hd, rows, 1.0f, w.dP, bk, qi.p, qi.ld, 1.0f, w.dk_acc, hd);
  }
}

// The key block's summed dK and dV rows into the tensors: stored, or (accumulate) added to what they hold.
template <class T>
void store_key_block_grads(T* dk, T* dv, const FlashAttentionShape& s, int64_t b, int64_t g, int64_t kb,
                           int64_t cols, bool accumulate, const BackwardScratch& w) {
  const int64_t hd = s.head_dim;
  for (int64_t j = 0; j < cols; ++j) {
    T* dkrow = dk + (b * s.kv_len + kb + j) * s.ld_k + g * hd;
    T* dvrow = dv + (b * s.kv_len + kb + j) * s.ld_v + g * hd;
    const float* ka = w.dk_acc + j * hd;
    const float* va = w.dv_acc + j * hd;
    if constexpr (std::is_same_v<T, std::uint16_t>) {
      // The f32 path's `dk += dk_acc` on the widened row, narrowed once (as a whole-tensor f32 view would).
      for (auto [row, add] : {std::pair<T*, const float*>{dkrow, ka}, {dvrow, va}}) {
        if (!accumulate) {
          cast_f32_to_bf16_serial(add, row, hd);
          continue;
        }
        cast_bf16_to_f32_serial(row, w.row_buf, hd);
#pragma omp simd
        for (int64_t d = 0; d < hd; ++d) w.row_buf[d] += add[d];
        cast_f32_to_bf16_serial(w.row_buf, row, hd);
      }
    } else if (accumulate) {
#pragma omp simd
      for (int64_t d = 0; d < hd; ++d) {
        dkrow[d] += ka[d];
        dvrow[d] += va[d];
      }
    } else {
      store_row(ka, dkrow, hd);
      store_row(va, dvrow, hd);
    }
  }
}

// One backward task: kv group g of batch b, key block by key block; dQ of the group's heads has this single writer.
template <class T>
void backward_task(const T* q, const T* k, const T* v, const T* out, const float* lse, const T* dout, T* dq, T* dk,
                   T* dv, const FlashAttentionShape& s, bool accumulate, int64_t b, int64_t g,
                   VectorIsa isa, const BackwardScratch& w) {
  const int64_t hd = s.head_dim, group = s.q_heads / s.kv_heads, bk = block_k(s);
  const T* kg = k + b * s.kv_len * s.ld_k + g * hd;
  const T* vg = v + b * s.kv_len * s.ld_v + g * hd;
  start_group_dq(dq, s, b, g, accumulate, w);
  for (int64_t kb = 0; kb < s.kv_len; kb += bk) {
    KeyBlock kblk{kb, std::min(bk, s.kv_len - kb), {nullptr, 0}, {nullptr, 0}, 0, 0};
    std::fill(w.dk_acc, w.dk_acc + kblk.cols * hd, 0.0f);
    std::fill(w.dv_acc, w.dv_acc + kblk.cols * hd, 0.0f);
    query_range(s, kb, kb + kblk.cols, kblk.i_begin, kblk.i_end);
    if (kblk.i_begin < kblk.i_end) {
      kblk.kt = load_block(kg + kb * s.ld_k, s.ld_k, kblk.cols, hd, w.k_buf);
      kblk.vt = load_block(vg + kb * s.ld_v, s.ld_v, kblk.cols, hd, w.v_buf);
      transpose_block(kblk.kt.p, kblk.kt.ld, kblk.cols, hd, w.kT, bk);
      transpose_block(kblk.vt.p, kblk.vt.ld, kblk.cols, hd, w.vT, bk);
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        backward_head_on_key_block(q, out, lse, dout, dq, s, b, g, h, kblk, isa, w);
      }
    }
    store_key_block_grads(dk, dv, s, b, g, kb, kblk.cols, accumulate, w);
  }
  finish_group_dq(dq, s, b, g, w);
}

template <class T>
void backward(const T* q, const T* k, const T* v, const T* out, const float* lse, const T* dout, T* dq, T* dk, T* dv,
              const FlashAttentionShape& s, bool accumulate, float* workspace, int threads) {
  constexpr bool kWiden = std::is_same_v<T, std::uint16_t>;
  check_shape("flash_attention_backward", s);
  const int64_t tasks = s.batch * s.kv_heads;
  const int64_t scratch = per_thread_floats(s, kWiden);
  const bool parallel =
      tasks > 1 && detail::worth_parallel(s.q_len * s.kv_len * s.head_dim * s.batch * s.q_heads / 2);
  const VectorIsa isa = best_vector_isa();
#pragma omp parallel num_threads(std::max(threads, 1)) if (parallel)
  {
    const BackwardScratch w = backward_scratch(workspace + omp_get_thread_num() * scratch, s, kWiden);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      backward_task(q, k, v, out, lse, dout, dq, dk, dv, s, accumulate, task / s.kv_heads, task % s.kv_heads, isa,
                    w);
    }
  }
}

}  // namespace

std::size_t flash_attention_workspace_floats(const FlashAttentionShape& shape, int threads, bool bf16) {
  return static_cast<std::size_t>(std::max(threads, 1) * per_thread_floats(shape, bf16));
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
