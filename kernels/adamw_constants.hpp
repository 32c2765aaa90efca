// AdamW's per-step host constants, written once for every backend (kernels/cpu/adamw.cpp and
// kernels/cuda/adamw.cpp use this, so the CPU and CUDA kernels start from the same bits).
//
// Invariant: the bias corrections are computed in double and each constant rounded to f32 once, exactly as
// torch.optim.AdamW's single-tensor path does; the kernels then apply them in the order of
// kernels/cpu/adamw.hpp. Pure and header-only (no engine headers), so nvcc may include it; the argument
// checks (betas, eps, step) stay with each backend's entry point.
#pragma once

#include <cmath>
#include <cstdint>

namespace cleave::kernels {

struct AdamWConstants {
  float decay;            // 1 - lr * weight_decay (decoupled decay)
  float one_minus_beta1;  // lerp weight of the new gradient in m
  float beta2;
  float one_minus_beta2;
  float step_size;     // lr / (1 - beta1^step)
  float inv_bc2_sqrt;  // 1 / sqrt(1 - beta2^step)
  float eps;
};

inline AdamWConstants adamw_constants(float lr, float beta1, float beta2, float eps, float weight_decay,
                                      std::int64_t step) {
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(step));
  const double bias_correction2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(step));
  AdamWConstants k{};
  k.decay = 1.0f - lr * weight_decay;
  k.one_minus_beta1 = 1.0f - beta1;
  k.beta2 = beta2;
  k.one_minus_beta2 = 1.0f - beta2;
  k.step_size = static_cast<float>(static_cast<double>(lr) / bias_correction1);
  k.inv_bc2_sqrt = static_cast<float>(1.0 / std::sqrt(bias_correction2));
  k.eps = eps;
  return k;
}

}  // namespace cleave::kernels
