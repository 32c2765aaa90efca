// AdamW, following torch.optim.AdamW's single-tensor path operation for operation. See adamw.hpp.
#include "kernels/cpu/adamw.hpp"

#include <cmath>

#include "engine/core/error.hpp"
#include "kernels/cpu/parallel.hpp"

namespace cleave::kernels::cpu {

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                  float eps, float weight_decay, int64_t step) {
  CLEAVE_ASSERT(n >= 0, "adamw_update: negative size {}", n);
  CLEAVE_ASSERT(step >= 1, "adamw_update: step is the 1-based update count, got {}", step);
  CLEAVE_CHECK(beta1 >= 0.0f && beta1 < 1.0f && beta2 >= 0.0f && beta2 < 1.0f,
               "adamw: betas must be in [0, 1), got ({}, {})", beta1, beta2);
  CLEAVE_CHECK(eps > 0.0f, "adamw: eps must be > 0, got {}", eps);
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(step));
  const double bias_correction2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(step));
  const float step_size = static_cast<float>(static_cast<double>(lr) / bias_correction1);
  const float inv_bc2_sqrt = static_cast<float>(1.0 / std::sqrt(bias_correction2));
  const float decay = 1.0f - lr * weight_decay;
  const float one_minus_beta1 = 1.0f - beta1;
  const float one_minus_beta2 = 1.0f - beta2;
#pragma omp parallel for simd schedule(static) if (detail::worth_parallel(n))
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i];
    const float p = param[i] * decay;
    const float mi = m[i] + one_minus_beta1 * (g - m[i]);  // lerp(m, g, 1 - beta1), as PyTorch
    const float vi = beta2 * v[i] + one_minus_beta2 * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = p - step_size * mi / (std::sqrt(vi) * inv_bc2_sqrt + eps);
  }
}

}  // namespace cleave::kernels::cpu
