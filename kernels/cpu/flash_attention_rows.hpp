// Internal to flash_attention.cpp and flash_attention_backward.cpp: the element-wise work on one block of scores
// between its GEMMs (the forward's online-softmax update, the backward's recomputed probabilities, dS, and D =
// rowsum(dO * O)), compiled for the baseline vectors, AVX2 and AVX-512 and chosen at run time (vector_isa.hpp), and the
// causal / window mask.
//
// Invariant: every path gives the same bits (FlashAttentionRows.EveryIsaPathGivesTheSameBits): the element-wise
// operations are the same IEEE operations without contraction into FMA, and every sum runs over 16 lane
// accumulators (element i into lane i mod 16, whatever the vector width), added lane 0 to 15 at the end. Masked
// entries are written as exact zeros.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/flash_attention.hpp"
#include "kernels/cpu/vector_isa.hpp"

namespace cleave::kernels::cpu::flash_rows {

// Keys visible to query position pi: [key_lo, key_hi) (local key indices).
inline int64_t key_hi(const FlashAttentionShape& s, int64_t pi) {
  return s.causal ? std::clamp<int64_t>(pi - s.k_offset + 1, 0, s.kv_len) : s.kv_len;
}
inline int64_t key_lo(const FlashAttentionShape& s, int64_t pi) {
  return s.window > 0 ? std::clamp<int64_t>(pi - s.window + 1 - s.k_offset, 0, s.kv_len) : 0;
}

// One block of scores: rows query rows from global position p_first, keys [kb, kb + cols), row stride ld.
struct BlockRows {
  int64_t p_first, rows, kb, cols, ld;
};

// Forward, over S [rows, ld]: S's visible entries become exp(S - m_new) (m_new the row's new maximum), the rest
// exact zeros; l = l * alpha + rowsum, m = m_new, and the rows of acc [rows, hd] are scaled by alpha =
// exp(m_old - m_new) (0 when m_old is -inf). A row with no visible key is zeroed and keeps m, l, acc.
// ln2_shift (the kernels that round P to bf16): m_new is the maximum rounded to the nearest multiple of ln 2, so P
// is at most sqrt(2) and two shifts of one row differ by a power of two up to f32 rounding: P's bf16 rounding then
// does not depend on which keys the running maximum has seen (ring attention's pieces round P as one call does).
void softmax_update(VectorIsa isa, const FlashAttentionShape& s, const BlockRows& blk, float* S, float* m, float* l,
                    float* acc, int64_t hd, bool ln2_shift = false);

// Backward, over S [rows, ld]: P = exp(S - lse[r]) on the visible entries, exact zeros elsewhere and on rows whose
// lse is -inf (rows that see no key at all).
void probabilities(VectorIsa isa, const FlashAttentionShape& s, const BlockRows& blk, const float* lse, float* S);

// dS = P (dP - D[r]) scale over rows x cols, in place over dP (both row stride ld).
void scores_grad(VectorIsa isa, const float* P, const float* D, int64_t rows, int64_t cols, int64_t ld, float scale,
                 float* dP);

// D[r] = sum_d o[r, d] * d_o[r, d] for rows rows of hd values (row strides ld_o, ld_do).
void output_dots(VectorIsa isa, const float* o, int64_t ld_o, const float* d_o, int64_t ld_do, int64_t rows,
                 int64_t hd, float* D);

}  // namespace cleave::kernels::cpu::flash_rows
