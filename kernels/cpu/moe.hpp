// Mixture-of-experts routing kernels (ops.hpp "Mixture of experts"): gathering tokens into their experts' rows,
// combining the experts' rows back into tokens with their routing weights, and the combine's weight gradient.
//
// Invariant: every output element is written by one thread from a fixed order of terms (the k rows of a token
// in j order; a dot over columns in column order), so results do not depend on the thread count. Indices are
// checked here against their range (an out-of-range index is a bug of the caller: CLEAVE_ASSERT).
#pragma once

#include <cstdint>

namespace cleave::kernels::cpu {

// out[r, :] = (scale ? scale[r] : 1) · x[index[r], :] for r < rows; x has n_tokens rows of d.
void moe_gather(const float* x, const std::int32_t* index, const float* scale, float* out, std::int64_t rows,
                std::int64_t n_tokens, std::int64_t d);
// out[n, :] = Σ_j (weight ? weight[n, j] : 1) · src[rows[n, j], :] for n < tokens, j < k; src has n_rows rows.
void moe_combine(const float* src, const std::int32_t* rows, const float* weight, float* out, std::int64_t tokens,
                 std::int64_t k, std::int64_t n_rows, std::int64_t d);
// dweight[n, j] = Σ_c dy[n, c] · src[rows[n, j], c].
void moe_combine_weight_grad(const float* dy, const float* src, const std::int32_t* rows, float* dweight,
                             std::int64_t tokens, std::int64_t k, std::int64_t n_rows, std::int64_t d);

}  // namespace cleave::kernels::cpu
