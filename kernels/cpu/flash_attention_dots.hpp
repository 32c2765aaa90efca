// Internal to flash_attention.cpp and flash_attention_backward.cpp: the bf16 kernel's score products S = scale * A B^T
// of two bf16 row blocks that share the head dimension (Q K^T in the forward and backward, dO V^T in the backward),
// with f32 accumulation, on the CPU's bf16 dot-product instruction (AVX-512 BF16's vdpbf16ps) where it has one, else on
// f32 FMAs that give its bits.
//
// Invariant: every path gives the same bits (FlashAttentionDots.EveryPathGivesTheSameBits). Element (r, c) is one
// f32 lane accumulating over the head dimension pair by pair, each pair as vdpbf16ps adds it: acc += a[2p+1] b[2p+1],
// then acc += a[2p] b[2p], each rounded to nearest even; a product of two bf16 values is exact in f32, so these
// are the additions of the exact products, fused or not. The one exception is the instruction's flushing of
// subnormals (inputs, and sums below 2^-126 in magnitude, to zero), which the FMA paths do not copy; attention's
// operands and scores never come near 1e-38. The sum is multiplied by scale once, at the end.
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

}  // namespace cleave::kernels::cpu::flash_dots
