// AdamW, following torch.optim.AdamW's single-tensor path operation for operation. See adamw.hpp.
// The body is written once over generic vectors (one lane for the tail), so every element gets the same
// arithmetic; it is memory-bound once vectorised (5 streams of floats).
#include "kernels/cpu/adamw.hpp"

#include <cmath>

#include "engine/core/error.hpp"
#include "kernels/adamw_constants.hpp"
#include "kernels/cpu/multi_tensor.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/vec_math.hpp"

namespace cleave::kernels::cpu {
namespace {

using detail::f32xN;
using detail::kLanes;
using kernels::AdamWConstants;

// Updates lanes [i, i + kLanes) of param/m/v in place.
inline void adamw_lanes(const AdamWConstants& k, float* param, const float* grad, float* m, float* v, int64_t i) {
  const f32xN g = detail::load_vec(grad + i);
  const f32xN m_old = detail::load_vec(m + i);
  const f32xN mi = m_old + k.one_minus_beta1 * (g - m_old);  // lerp(m, g, 1 - beta1), as PyTorch
  const f32xN vi = k.beta2 * detail::load_vec(v + i) + k.one_minus_beta2 * g * g;
  const f32xN p = detail::load_vec(param + i) * k.decay;
  detail::store_vec(m + i, mi);
  detail::store_vec(v + i, vi);
  detail::store_vec(param + i, p - k.step_size * mi / (detail::sqrt_vec(vi) * k.inv_bc2_sqrt + k.eps));
}

// Elements [begin, end) of one tensor, begin a multiple of kLanes; a tail shorter than a vector (end == n, n not a
// multiple of kLanes) is padded into locals so the same lane arithmetic runs.
void adamw_range(const AdamWConstants& k, float* param, const float* grad, float* m, float* v, int64_t begin,
                 int64_t end) {
  const int64_t body_end = begin + (end - begin) / kLanes * kLanes;
  for (int64_t i = begin; i < body_end; i += kLanes) adamw_lanes(k, param, grad, m, v, i);
  const int64_t tail = end - body_end;
  if (tail > 0) {
    float p[kLanes] = {}, g[kLanes] = {}, mm[kLanes] = {}, vv[kLanes] = {};
    for (int64_t i = 0; i < tail; ++i) {
      p[i] = param[body_end + i];
      g[i] = grad[body_end + i];
      mm[i] = m[body_end + i];
      vv[i] = v[body_end + i];
    }
    adamw_lanes(k, p, g, mm, vv, 0);
    for (int64_t i = 0; i < tail; ++i) {
      param[body_end + i] = p[i];
      m[body_end + i] = mm[i];
      v[body_end + i] = vv[i];
    }
  }
}

void check_hyper(float beta1, float beta2, float eps, int64_t step) {
  CLEAVE_ASSERT(step >= 1, "adamw_update: step is the 1-based update count, got {}", step);
  CLEAVE_CHECK(beta1 >= 0.0f && beta1 < 1.0f && beta2 >= 0.0f && beta2 < 1.0f,
               "adamw: betas must be in [0, 1), got ({}, {})", beta1, beta2);
  CLEAVE_CHECK(eps > 0.0f, "adamw: eps must be > 0, got {}", eps);
}

}  // namespace

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                  float eps, float weight_decay, int64_t step) {
  CLEAVE_ASSERT(n >= 0, "adamw_update: negative size {}", n);
  check_hyper(beta1, beta2, eps, step);
  const AdamWConstants k = kernels::adamw_constants(lr, beta1, beta2, eps, weight_decay, step);
  const int64_t vectors = n / kLanes;
  CLEAVE_PARALLEL_FOR(vi, vectors, detail::worth_parallel(n), adamw_lanes(k, param, grad, m, v, vi * kLanes);)
  adamw_range(k, param, grad, m, v, vectors * kLanes, n);  // the tail
}

void adamw_update_many(const AdamWTensor* tensors, int64_t count, float lr, float beta1, float beta2, float eps,
                       int64_t step) {
  CLEAVE_ASSERT(count >= 0, "adamw_update_many: negative tensor count {}", count);
  check_hyper(beta1, beta2, eps, step);
  int64_t total = 0;
  for (int64_t t = 0; t < count; ++t) {
    CLEAVE_ASSERT(tensors[t].n >= 0, "adamw_update_many: tensor {} has negative size {}", t, tensors[t].n);
    total += tensors[t].n;
  }
  detail::for_each_piece(
      count, [&](int64_t t) { return tensors[t].n; }, detail::worth_parallel(total),
      [&](int64_t t, int64_t begin, int64_t end) {
        const AdamWTensor& x = tensors[t];
        const AdamWConstants k = kernels::adamw_constants(lr, beta1, beta2, eps, x.weight_decay, step);
        adamw_range(k, x.param, x.grad, x.m, x.v, begin, end);
      });
}

}  // namespace cleave::kernels::cpu
