// Mixture-of-experts routing kernels on the CPU (see moe.hpp): one OpenMP thread per output row.
#include "kernels/cpu/moe.hpp"

#include "engine/core/error.hpp"

namespace cleave::kernels::cpu {

void moe_gather(const float* x, const std::int32_t* index, const float* scale, float* out, std::int64_t rows,
                std::int64_t n_tokens, std::int64_t d) {
  for (std::int64_t r = 0; r < rows; ++r) {
    CLEAVE_ASSERT(index[r] >= 0 && index[r] < n_tokens, "moe_gather: index[{}] = {} is outside [0, {})", r, index[r],
                  n_tokens);
  }
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* src = x + static_cast<std::int64_t>(index[r]) * d;
    const float s = scale != nullptr ? scale[r] : 1.0f;
    float* dst = out + r * d;
    for (std::int64_t c = 0; c < d; ++c) dst[c] = s * src[c];
  }
}

void moe_combine(const float* src, const std::int32_t* rows, const float* weight, float* out, std::int64_t tokens,
                 std::int64_t k, std::int64_t n_rows, std::int64_t d) {
  for (std::int64_t i = 0; i < tokens * k; ++i) {
    CLEAVE_ASSERT(rows[i] >= 0 && rows[i] < n_rows, "moe_combine: rows[{}] = {} is outside [0, {})", i, rows[i],
                  n_rows);
  }
#pragma omp parallel for schedule(static)
  for (std::int64_t n = 0; n < tokens; ++n) {
    float* dst = out + n * d;
    for (std::int64_t c = 0; c < d; ++c) dst[c] = 0.0f;
    for (std::int64_t j = 0; j < k; ++j) {
      const float w = weight != nullptr ? weight[n * k + j] : 1.0f;
      const float* s = src + static_cast<std::int64_t>(rows[n * k + j]) * d;
      for (std::int64_t c = 0; c < d; ++c) dst[c] += w * s[c];
    }
  }
}

void moe_combine_weight_grad(const float* dy, const float* src, const std::int32_t* rows, float* dweight,
                             std::int64_t tokens, std::int64_t k, std::int64_t n_rows, std::int64_t d) {
  for (std::int64_t i = 0; i < tokens * k; ++i) {
    CLEAVE_ASSERT(rows[i] >= 0 && rows[i] < n_rows, "moe_combine_weight_grad: rows[{}] = {} is outside [0, {})", i,
                  rows[i], n_rows);
  }
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < tokens * k; ++i) {
    const float* g = dy + (i / k) * d;
    const float* s = src + static_cast<std::int64_t>(rows[i]) * d;
    float acc = 0.0f;
    for (std::int64_t c = 0; c < d; ++c) acc += g[c] * s[c];
    dweight[i] = acc;
  }
}

}  // namespace cleave::kernels::cpu
