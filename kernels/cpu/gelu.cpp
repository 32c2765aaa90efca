// GELU (tanh approximation, GPT-2). See gelu.hpp. The body is written once over generic vectors and run
// on a one-lane splat for the tail, so every element gets the same arithmetic.
#include "kernels/cpu/gelu.hpp"

#include "engine/core/error.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/vec_math.hpp"

namespace cleave::kernels::cpu {
namespace {

using detail::f32xN;
using detail::kLanes;

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCoeff = 0.044715f;

inline f32xN gelu_vec(f32xN x) {
  const f32xN u = kSqrt2OverPi * (x + kCoeff * x * x * x);
  return 0.5f * x * (1.0f + detail::tanh_vec(u));
}

inline f32xN gelu_grad_vec(f32xN x, f32xN dy) {
  const f32xN u = kSqrt2OverPi * (x + kCoeff * x * x * x);
  const f32xN t = detail::tanh_vec(u);
  const f32xN sech2 = 1.0f - t * t;
  const f32xN du_dx = kSqrt2OverPi * (1.0f + 3.0f * kCoeff * x * x);
  return dy * (0.5f * (1.0f + t) + 0.5f * x * sech2 * du_dx);
}

}  // namespace

void gelu_forward(const float* x, float* y, int64_t n) {
  CLEAVE_ASSERT(n >= 0, "gelu_forward: negative size {}", n);
  const int64_t vectors = n / kLanes;
#pragma omp parallel for schedule(static) if (detail::worth_parallel(n))
  for (int64_t v = 0; v < vectors; ++v) detail::store_vec(y + v * kLanes, gelu_vec(detail::load_vec(x + v * kLanes)));
  for (int64_t i = vectors * kLanes; i < n; ++i) y[i] = gelu_vec(detail::splat(x[i]))[0];
}

void gelu_backward(const float* x, const float* dy, float* dx, int64_t n) {
  CLEAVE_ASSERT(n >= 0, "gelu_backward: negative size {}", n);
  const int64_t vectors = n / kLanes;
#pragma omp parallel for schedule(static) if (detail::worth_parallel(n))
  for (int64_t v = 0; v < vectors; ++v) {
    const int64_t i = v * kLanes;
    detail::store_vec(dx + i, gelu_grad_vec(detail::load_vec(x + i), detail::load_vec(dy + i)));
  }
  for (int64_t i = vectors * kLanes; i < n; ++i) dx[i] = gelu_grad_vec(detail::splat(x[i]), detail::splat(dy[i]))[0];
}

}  // namespace cleave::kernels::cpu
