// Mixture-of-experts routing kernels (ops.hpp "Mixture of experts"): gathering tokens into their experts' rows,
// combining the experts' rows back into tokens with their routing weights, and the combine's weight gradient.
//
// Operands are f32 or bf16 (bit patterns, cast.hpp; In and Out each float or std::uint16_t): a bf16 row is widened
// (exactly) as it is read and an output row narrowed once (round to nearest even) as it is written, a row at a
// time, so a bf16 call gives the bits of the f32 kernel on the widened inputs followed by one narrowing, and no
// whole-tensor f32 copy is made. Arithmetic is f32 throughout.
//
// Invariant: every output element is written by one thread from a fixed order of terms (the k rows of a token
// in j order, accumulated in f32; a dot over columns in column order), so results do not depend on the thread
// count; expert parallelism's bit-exactness across ep degrees rests on the combine's order (by token, then j).
// Indices are checked here against their range (an out-of-range index is a bug of the caller: CLEAVE_ASSERT).
//
// scratch: the per-thread f32 rows a bf16 output or a bf16 dot needs (kernel_scratch.hpp): the run's, so a
// steady-state call allocates nothing; null (tests) = one made for the call. Never changes a bit.
#pragma once

#include <cstdint>

#include "kernels/cpu/kernel_scratch.hpp"

namespace cleave::kernels::cpu {

// out[r, :] = (scale ? scale[r] : 1) · x[index[r], :] for r < rows; x has n_tokens rows of d.
template <typename In, typename Out>
void moe_gather(const In* x, const std::int32_t* index, const float* scale, Out* out, std::int64_t rows,
                std::int64_t n_tokens, std::int64_t d, KernelScratch* scratch = nullptr);
// out[n, :] = Σ_j (weight ? weight[n, j] : 1) · src[rows[n, j], :] for n < tokens, j < k; src has n_rows rows.
template <typename In, typename Out>
void moe_combine(const In* src, const std::int32_t* rows, const float* weight, Out* out, std::int64_t tokens,
                 std::int64_t k, std::int64_t n_rows, std::int64_t d, KernelScratch* scratch = nullptr);
// dweight[n, j] = Σ_c dy[n, c] · src[rows[n, j], c].
template <typename Dy, typename Src>
void moe_combine_weight_grad(const Dy* dy, const Src* src, const std::int32_t* rows, float* dweight,
                             std::int64_t tokens, std::int64_t k, std::int64_t n_rows, std::int64_t d,
                             KernelScratch* scratch = nullptr);

}  // namespace cleave::kernels::cpu
