// Internal to kernels/cuda/*.cu: f32 loads and stores over f32 or bf16 storage, and the dispatch of a
// kernel template over a FloatType known only at run time.
//
// Invariant: load widens exactly (bf16 -> f32 is exact) and store rounds to nearest even, as
// cleave::float_to_bf16 and the CPU backend's F32Out do, so a bf16 result differs from the f32 kernel's only by
// that final rounding.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/float_type.hpp"

namespace cleave::kernels::cuda::detail {

__device__ __forceinline__ float load(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float load(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void store(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }

// Calls f(T{}) with T = float or __nv_bfloat16 (a tag value; only its type is used).
template <typename F>
cudaError_t with_float_type(FloatType type, F&& f) {
  if (type == FloatType::kBF16) return f(__nv_bfloat16{});
  return f(float{});
}

}  // namespace cleave::kernels::cuda::detail
