// Mixture-of-experts routing kernels on the CPU (see moe.hpp): output rows shared out over the OpenMP team when
// the call is worth one (CLEAVE_PARALLEL_FOR); each output element has one writer, so no thread count changes a bit.
// The weight gradient's dots run on one native vector (vec_math.hpp) with a fixed reduction order: kLanes partial
// sums over the columns in order, added lane by lane, then the tail (a scalar loop would not vectorise: GCC keeps a
// float sum's order).
#include "kernels/cpu/moe.hpp"

#include "engine/core/error.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/vec_math.hpp"

namespace cleave::kernels::cpu {
namespace {

float dot(const float* a, const float* b, std::int64_t d) {
  using namespace detail;
  f32xN acc = splat(0.0f);
  std::int64_t c = 0;
  for (; c + kLanes <= d; c += kLanes) acc += load_vec(a + c) * load_vec(b + c);
  float sum = hsum(acc);
  for (; c < d; ++c) sum += a[c] * b[c];
  return sum;
}

}  // namespace

void moe_gather(const float* x, const std::int32_t* index, const float* scale, float* out, std::int64_t rows,
                std::int64_t n_tokens, std::int64_t d) {
  for (std::int64_t r = 0; r < rows; ++r) {
    CLEAVE_ASSERT(index[r] >= 0 && index[r] < n_tokens, "moe_gather: index[{}] = {} is outside [0, {})", r, index[r],
                  n_tokens);
  }
  CLEAVE_PARALLEL_FOR(r, rows, detail::worth_parallel(rows * d),
    const float* src = x + static_cast<std::int64_t>(index[r]) * d;
    const float s = scale != nullptr ? scale[r] : 1.0f;
    float* dst = out + r * d;
    for (std::int64_t c = 0; c < d; ++c) dst[c] = s * src[c];)
}

void moe_combine(const float* src, const std::int32_t* rows, const float* weight, float* out, std::int64_t tokens,
                 std::int64_t k, std::int64_t n_rows, std::int64_t d) {
  for (std::int64_t i = 0; i < tokens * k; ++i) {
    CLEAVE_ASSERT(rows[i] >= 0 && rows[i] < n_rows, "moe_combine: rows[{}] = {} is outside [0, {})", i, rows[i],
                  n_rows);
  }
  CLEAVE_PARALLEL_FOR(n, tokens, detail::worth_parallel(tokens * k * d),
    float* dst = out + n * d;
    for (std::int64_t c = 0; c < d; ++c) dst[c] = 0.0f;
    for (std::int64_t j = 0; j < k; ++j) {
      const float w = weight != nullptr ? weight[n * k + j] : 1.0f;
      const float* s = src + static_cast<std::int64_t>(rows[n * k + j]) * d;
      for (std::int64_t c = 0; c < d; ++c) dst[c] += w * s[c];
    })
}

void moe_combine_weight_grad(const float* dy, const float* src, const std::int32_t* rows, float* dweight,
                             std::int64_t tokens, std::int64_t k, std::int64_t n_rows, std::int64_t d) {
  for (std::int64_t i = 0; i < tokens * k; ++i) {
    CLEAVE_ASSERT(rows[i] >= 0 && rows[i] < n_rows, "moe_combine_weight_grad: rows[{}] = {} is outside [0, {})", i,
                  rows[i], n_rows);
  }
  CLEAVE_PARALLEL_FOR(i, tokens * k, detail::worth_parallel(tokens * k * d),
    dweight[i] = dot(dy + (i / k) * d, src + static_cast<std::int64_t>(rows[i]) * d, d);)
}

}  // namespace cleave::kernels::cpu
