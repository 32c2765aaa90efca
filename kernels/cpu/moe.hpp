// Mixture-of-experts routing kernels (ops.hpp "Mixture of experts"): gathering tokens into their experts' rows,
// combining the experts' rows back into tokens with their routing weights, and the combine's weight gradient.
//
// Operands are f32 or bf16 (bit patterns, cast.hpp; In and Out each float or std::uint16_t). Every value is computed
// in f32 from its widened (exact) inputs and a bf16 output is narrowed once, to nearest even (cleave::float_to_bf16),
// so a bf16 call gives the bits of the f32 kernel on the widened inputs followed by one narrowing; the conversion is
// done in registers, a vector at a time, no row or tensor copy in f32. The arithmetic per element, whatever the
// vector path (vector_isa.hpp) and the thread count:
//   gather   out = s · x (s = scale[r]; without a scale the row is copied, or only converted between dtypes);
//   combine  acc = 0, then acc += w_j · src_j for j = 0..k-1 in order (w_j = 1 without weights);
//   dweight  the products dy[c] · src[c] summed into L partial sums (column c into sum c mod L, in column order)
//            over the columns of whole groups of L, the L sums added in order to 0, then the last d mod L products;
//            L is kMoeDotLanes (kernels/moe_dot_lanes.hpp: 4, a constant, whatever flags the file is compiled with),
//            whatever path runs, as the CUDA twin reproduces (kernels/cuda/moe_dot_order.hpp, at the same constant).
//
// Invariant: every output element is written by one thread from that fixed order of terms, so results depend
// neither on the thread count nor on the vector path (MoeKernels.EveryIsaPathGivesTheBitsOfTheScalarOrder); expert
// parallelism's bit-exactness across ep degrees rests on the combine's order (by token, then j). Indices are checked
// against their range before any work (an out-of-range index is a bug of the caller: CLEAVE_ASSERT). No allocation.
#pragma once

#include <cstdint>

#include "kernels/cpu/vector_isa.hpp"

namespace cleave::kernels::cpu {

// out[r, :] = (scale ? scale[r] : 1) · x[index[r], :] for r < rows; x has n_tokens rows of d.
template <typename In, typename Out>
void moe_gather(const In* x, const std::int32_t* index, const float* scale, Out* out, std::int64_t rows,
                std::int64_t n_tokens, std::int64_t d);
// out[n, :] = Σ_j (weight ? weight[n, j] : 1) · src[rows[n, j], :] for n < tokens, j < k; src has n_rows rows.
template <typename In, typename Out>
void moe_combine(const In* src, const std::int32_t* rows, const float* weight, Out* out, std::int64_t tokens,
                 std::int64_t k, std::int64_t n_rows, std::int64_t d);
// dweight[n, j] = Σ_c dy[n, c] · src[rows[n, j], c].
template <typename Dy, typename Src>
void moe_combine_weight_grad(const Dy* dy, const Src* src, const std::int32_t* rows, float* dweight,
                             std::int64_t tokens, std::int64_t k, std::int64_t n_rows, std::int64_t d);

// The same on one vector path; bf16_insn: narrow with AVX-512 BF16 (only with kAvx512, on a CPU that has it,
// vector_isa.hpp's avx512_bf16_available). The three above run the widest this CPU has. For tests and benchmarks.
template <typename In, typename Out>
void moe_gather_isa(VectorIsa isa, bool bf16_insn, const In* x, const std::int32_t* index, const float* scale,
                    Out* out, std::int64_t rows, std::int64_t n_tokens, std::int64_t d);
template <typename In, typename Out>
void moe_combine_isa(VectorIsa isa, bool bf16_insn, const In* src, const std::int32_t* rows, const float* weight,
                     Out* out, std::int64_t tokens, std::int64_t k, std::int64_t n_rows, std::int64_t d);
template <typename Dy, typename Src>
void moe_combine_weight_grad_isa(VectorIsa isa, bool bf16_insn, const Dy* dy, const Src* src,
                                 const std::int32_t* rows, float* dweight, std::int64_t tokens, std::int64_t k,
                                 std::int64_t n_rows, std::int64_t d);

}  // namespace cleave::kernels::cpu
