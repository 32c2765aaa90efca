// FlashAttention-2 on the CPU, the forward (see flash_attention.hpp; the math is in docs/ops.md "Attention"; the
// backward is flash_attention_backward.cpp, the helpers both share flash_attention_blocks.hpp).
//
// Forward, one task per (batch, query head, query block of kFlashBlockQ rows): S = scale * Q K^T over key
// blocks of kFlashBlockK (one small GEMM each), the online-softmax update of the row maxima m, sums l and the
// unnormalised accumulator, then acc += P V (GEMM). Each output row has a single writer and every block GEMM runs on
// its thread alone, so the bits depend neither on the thread count nor on how the batch and the heads are split.
//
// bf16 operands: written once over the element type. Q K^T runs on the bf16 dot path (flash_attention_dots.hpp: key
// pairs packed once per key block); P V with P rounded to bf16 (the row sums l stay those of the f32 P), on the dot
// path (P rounded as it is packed, V's pairs of rows packed per key block) or on the f32 GEMM (P rounded in place, V
// widened), as paths.value says; the f32 accumulator is narrowed once per output row.
#include "kernels/cpu/flash_attention.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/cpu/flash_attention_blocks.hpp"
#include "kernels/cpu/flash_attention_dots.hpp"
#include "kernels/cpu/flash_attention_rows.hpp"
#include "kernels/cpu/parallel.hpp"

namespace cleave::kernels::cpu {
namespace {

using namespace flash_blocks;

using flash_rows::key_hi;
using flash_rows::key_lo;

// The forward's per-thread scratch, laid out as per_thread_floats counts it.
struct ForwardScratch {
  float* S;       // [bq, bk] scores, then probabilities
  float* acc;     // [bq, hd] unnormalised output rows
  float* m;       // [bq] row maxima
  float* l;       // [bq] row sums
  float* k_rhs;   // f32: [hd, bk] the key block transposed; bf16: its pairs
  float* q_lhs;   // bf16 only: Q's rows for the dot path
  float* p_lhs;   // bf16, the value region (flash_attention_blocks.hpp): dot path P rounded; GEMM path V widened
  float* v_rhs;   // bf16, dot path: V's pairs along the keys
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
  w.p_lhs = bf16 ? w.q_lhs + flash_dots::rows_floats(bq, hd) : nullptr;
  w.v_rhs = bf16 ? w.p_lhs + flash_dots::rounded_floats(bq, bk) : nullptr;
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
  }
  store_rows(w.acc, hd, out_rows, s.ld_o, rows, hd);
}

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
    flash_rows::softmax_update(paths.isa, s, {p_first, rows, kb, cols, bk}, w.S, w.m, w.l, w.acc, hd,
                               std::is_same_v<T, std::uint16_t> || s.round_probabilities);
    if constexpr (std::is_same_v<T, std::uint16_t>) {
      if (paths.value == flash_dots::ValueProducts::kDots) {
        flash_dots::pack_pairs_of_rows(paths.dot, vg + kb * s.ld_v, s.ld_v, cols, hd, w.v_rhs);
        const flash_dots::Lhs p = flash_dots::pack_rows_rounded(paths.dot, w.S, bk, rows, cols, w.p_lhs);
        flash_dots::products(paths.dot, p, rows, w.v_rhs, hd, cols, w.acc, hd);
      } else {  // the value region holds V widened (flash_attention_blocks.hpp)
        flash_dots::round_in_place(paths.dot, w.S, bk, rows, cols);
        const Block vw = widen_block(vg + kb * s.ld_v, s.ld_v, cols, hd, w.p_lhs);
        single_gemm(false, false, rows, hd, cols, 1.0f, w.S, bk, vw.p, vw.ld, 1.0f, w.acc, hd);
      }
    } else {
      if (s.round_probabilities) flash_dots::round_in_place(paths.dot, w.S, bk, rows, cols);
      single_gemm(false, false, rows, hd, cols, 1.0f, w.S, bk, vg + kb * s.ld_v, s.ld_v, 1.0f, w.acc, hd);
    }
  }
  store_forward_rows(s, w, rows, lse + (b * s.q_heads + h) * s.q_len + i0, out + (b * s.q_len + i0) * s.ld_o + h * hd);
}

template <class T>
void forward(const T* q, const T* k, const T* v, T* out, float* lse, const FlashAttentionShape& s, float* workspace,
             int threads, FlashValuePath value_path) {
  constexpr bool kBf16 = std::is_same_v<T, std::uint16_t>;
  check_shape("flash_attention_forward", s);
  const int64_t hd = s.head_dim;
  const int64_t bq = block_q(s);
  const int64_t q_blocks = (s.q_len + bq - 1) / bq;
  const int64_t tasks = s.batch * s.q_heads * q_blocks;
  const int64_t scratch = per_thread_floats(s, kBf16);
  const bool parallel = tasks > 1 && detail::worth_parallel(s.q_len * s.kv_len * hd * s.batch * s.q_heads / 2);
  const Paths paths = run_paths(value_path);
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

}  // namespace

std::size_t flash_attention_workspace_floats(const FlashAttentionShape& shape, int threads, bool bf16) {
  const int team = std::max(threads, 1);
  return static_cast<std::size_t>(team * per_thread_floats(shape, bf16) + partial_floats(shape, team));
}

void flash_attention_forward(const float* q, const float* k, const float* v, float* out, float* lse,
                             const FlashAttentionShape& s, float* workspace, int threads) {
  forward(q, k, v, out, lse, s, workspace, threads, FlashValuePath::kAuto);
}

void flash_attention_forward(const std::uint16_t* q, const std::uint16_t* k, const std::uint16_t* v,
                             std::uint16_t* out, float* lse, const FlashAttentionShape& s, float* workspace,
                             int threads, FlashValuePath value_path) {
  forward(q, k, v, out, lse, s, workspace, threads, value_path);
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
