// Internal to flash_attention.cpp and flash_attention_backward.cpp: the bf16 kernel's block products with f32
// accumulation, on the CPU's bf16 dot-product instruction (AVX-512 BF16's vdpbf16ps) where it has one, else on f32 FMAs
// that give its bits: the score products S = scale * A B^T of two bf16 row blocks that share the head dimension (Q K^T
// in the forward and backward, dO V^T in the backward), and the value products C += A B (P V, P^T dO, dS K, dS^T Q)
// with A an f32 block rounded to bf16 as it is packed (flash_attention_packs.cpp).
//
// Invariant: every path gives the same bits (FlashAttentionDots.EveryPathGivesTheSameBits...,
// FlashAttentionDots.ValueProducts...). Element (r, c) is one f32 lane accumulating over the contracted dimension pair
// by pair from zero, each pair as vdpbf16ps adds it: acc += a[2p+1] b[2p+1],
// then acc += a[2p] b[2p], each rounded to nearest even; a product of two bf16 values is exact in f32, so these
// are the additions of the exact products, fused or not. The one exception is the instruction's flushing of
// subnormals (inputs, and sums below 2^-126 in magnitude, to zero), which the FMA paths do not copy; attention's
// operands and scores never come near 1e-38 (P and dS: their packs flush subnormals to +0 on every path). The sum is
// multiplied by scale once at the end (scores), or added to C once (values).
//
// Layouts (in the kernel's f32 scratch): B packed by pack_pairs, pairs of the head dimension interleaved per column,
// columns padded to a multiple of kPairCols with zeros; A by pack_rows (bf16 rows, or for the FMA paths widened f32
// rows, of pair_dim(hd) values, the odd head dimension's pad zero).
#pragma once

#include <cstdint>

namespace cleave::kernels::cpu::flash_dots {

// The paths: the build's baseline vectors, AVX2 + FMA, AVX-512 and AVX-512 BF16 (vdpbf16ps); the last is the only
// one without f32 operand rows.
enum class DotIsa { kBaseline, kAvx2, kAvx512, kAvx512Bf16 };

DotIsa best_dot_isa();
bool dot_isa_available(DotIsa isa);

inline constexpr int64_t kPairCols = 16;

inline int64_t pair_dim(int64_t hd) { return (hd + 1) / 2 * 2; }
inline int64_t padded_cols(int64_t cols) { return (cols + kPairCols - 1) / kPairCols * kPairCols; }

// Floats of scratch pack_pairs writes for `cols` rows of hd values, and pack_rows for `rows` rows.
inline int64_t pairs_floats(int64_t cols, int64_t hd) { return padded_cols(cols) * pair_dim(hd) / 2; }
inline int64_t rows_floats(int64_t rows, int64_t hd) { return rows * pair_dim(hd); }

// b [cols, hd] (row stride ld) as pairs: out[(p * padded_cols + c) * 2 + e] = b[c, 2p + e], zero past cols and hd.
void pack_pairs(const std::uint16_t* b, int64_t ld, int64_t cols, int64_t hd, float* out);

// a [rows, hd] (row stride ld) as the path's operand rows (row stride pair_dim(hd) elements).
void pack_rows(DotIsa isa, const std::uint16_t* a, int64_t ld, int64_t rows, int64_t hd, float* out);

// S[r, c] = scale * sum_d a[r, d] b[c, d] for r < rows, c < cols (row stride ld; the pad columns untouched), from
// a packed by pack_rows(isa) and b by pack_pairs.
void scores(DotIsa isa, const float* a, int64_t rows, const float* b, int64_t cols, int64_t hd, float scale, float* S,
            int64_t ld);

// The value products (P V; backward P^T dO, dS K, dS^T Q): f32 P and dS rounded to bf16 as they are packed, as
// FlashAttention-2 and PyTorch's CPU flash kernel do, then the same pairwise f32 sums as the score products.
//
// The left-hand operand's pairs: row r's pair p at pair index r * rs + p * ps (a bf16 pair one 32-bit word for
// kAvx512Bf16, two floats for the FMA paths).
struct Lhs {
  const float* p;
  int64_t rs, ps;
};

// Floats pack_rows_rounded / pack_columns_rounded write for `rows` operand rows over k (either way).
inline int64_t rounded_floats(int64_t rows, int64_t k) { return rows * pair_dim(k); }

// a [rows, k] f32 (row stride ld) rounded (float_to_bf16; zeros and subnormals to +0, which vdpbf16ps would read as
// zero) as operand rows over k.
Lhs pack_rows_rounded(DotIsa isa, const float* a, int64_t ld, int64_t rows, int64_t k, float* out);

// a^T for a [k, cols] f32 (row stride ld), rounded as pack_rows_rounded: `cols` operand rows over k, packed from
// pairs of a's rows (no transpose).
Lhs pack_columns_rounded(DotIsa isa, const float* a, int64_t ld, int64_t k, int64_t cols, float* out);

// b [k, n] bf16 (row stride ld) as a products' right-hand side: the layout pack_pairs gives b^T (pairs of b's rows
// per column, columns padded to kPairCols, zero past k and n); pairs_floats(n, k) floats. The same bits on every
// path (isa picks the vector width of the copy).
void pack_pairs_of_rows(DotIsa isa, const std::uint16_t* b, int64_t ld, int64_t k, int64_t n, float* out);

// C[r, c] += sum_i a[r, i] b[i, c] for r < rows, c < cols (row stride ld): the pairwise sum from zero, then added to
// C once; a from pack_rows_rounded / pack_columns_rounded (isa), b from pack_pairs_of_rows.
void products(DotIsa isa, const Lhs& a, int64_t rows, const float* b, int64_t cols, int64_t k, float* C, int64_t ld);

// Where the value products run, a function of the CPU's path alone: on products() only with the bf16 dot instruction
// (kAvx512Bf16); the FMA paths' copy of its bits is slower there than the f32 block GEMM
// (benchmarks/kernels/RESULTS-2026-11-30-c-attention.md), so elsewhere the kernel runs the f32 GEMM on P and dS
// rounded in place (round_in_place) and the bf16 blocks widened: the same rounding of P and dS, other bits (the
// GEMM sums in its own order).
enum class ValueProducts { kDots, kGemm };
inline ValueProducts value_products_for(DotIsa isa) {
  return isa == DotIsa::kAvx512Bf16 ? ValueProducts::kDots : ValueProducts::kGemm;
}

// a [rows, cols] f32 (row stride ld) rounded in place to bf16 values as pack_rows_rounded rounds them (float_to_bf16,
// zeros and subnormals to +0), kept in f32; isa picks the vector width, the bits are the same.
void round_in_place(DotIsa isa, float* a, int64_t ld, int64_t rows, int64_t cols);

// The GEMM path's backward pass over P and dP [rows, cols] (row stride ld) in one: dP = P (dP - D) scale, the bits of
// flash_rows::scores_grad, then P and dS rounded in place as round_in_place rounds them.
void scores_grad_rounded(DotIsa isa, float* P, const float* D, int64_t rows, int64_t cols, int64_t ld, float scale,
                         float* dP);

}  // namespace cleave::kernels::cpu::flash_dots
