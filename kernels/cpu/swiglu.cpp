// SwiGLU forward / backward. See swiglu.hpp. Element-wise, so parallel over elements with the same
// arithmetic for every element (sigmoid as 1 / (1 + exp(-g)) in f32).
#include "kernels/cpu/swiglu.hpp"

#include <cmath>

#include "engine/core/error.hpp"
#include "kernels/cpu/parallel.hpp"

namespace cleave::kernels::cpu {

void swiglu_forward(const float* gate, const float* up, float* h, int64_t n) {
  CLEAVE_ASSERT(n >= 0, "swiglu_forward: negative size {}", n);
#pragma omp parallel for schedule(static) if (detail::worth_parallel(n))
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float s = 1.0f / (1.0f + std::exp(-g));
    h[i] = g * s * up[i];
  }
}

void swiglu_backward(const float* gate, const float* up, const float* dh, float* dgate, float* dup, int64_t n) {
  CLEAVE_ASSERT(n >= 0, "swiglu_backward: negative size {}", n);
#pragma omp parallel for schedule(static) if (detail::worth_parallel(n))
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float s = 1.0f / (1.0f + std::exp(-g));
    const float silu = g * s;
    dgate[i] = dh[i] * up[i] * (s * (1.0f + g * (1.0f - s)));
    dup[i] = dh[i] * silu;
  }
}

}  // namespace cleave::kernels::cpu
