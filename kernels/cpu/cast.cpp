// f32 <-> bf16 conversion (see cast.hpp). Plain loops over integer bit patterns: GCC vectorises them.
#include "kernels/cpu/cast.hpp"

#include <cstring>

#include "engine/core/dtype.hpp"
#include "kernels/cpu/parallel.hpp"

namespace cleave::kernels::cpu {

void cast_f32_to_bf16(const float* x, std::uint16_t* y, int64_t n) {
#pragma omp parallel for schedule(static) if (detail::worth_parallel(n))
  for (int64_t i = 0; i < n; ++i) y[i] = float_to_bf16(x[i]);
}

void cast_bf16_to_f32(const std::uint16_t* x, float* y, int64_t n) {
#pragma omp parallel for schedule(static) if (detail::worth_parallel(n))
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_float(x[i]);
}

}  // namespace cleave::kernels::cpu
