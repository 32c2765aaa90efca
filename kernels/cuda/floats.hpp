// Floats / ConstFloats: a device pointer and its FloatType (float_type.hpp), elements that kernels read and write
// as f32. This is the
// CUDA side of the CPU backend's numerics contract (kernels/ops/cpu_f32_view.hpp): bf16 is storage only; every
// load widens exactly, all arithmetic and accumulation is f32, and every store rounds once to nearest even.
//
// Invariant: the type travels with the pointer, so one kernel instantiation serves every mix of f32 and bf16
// operands (the seam allows each tensor its own float dtype) and the build stays one kernel per op. The branch
// on the type is uniform across the grid. (Kernels whose operands share one type may instead be templated over
// it with FloatType dispatch.) A float* or __nv_bfloat16* converts implicitly, so f32 callers pass
// plain pointers. Device-side load/store are in common.cuh.
#pragma once

#include <cuda_bf16.h>

#include <cstddef>

#include "kernels/cuda/float_type.hpp"

// Constructors usable in host and device code (this header is also compiled by the C++ compiler).
#if defined(__CUDACC__)
#define CLEAVE_HOST_DEVICE __host__ __device__
#else
#define CLEAVE_HOST_DEVICE
#endif

namespace cleave::kernels::cuda {

struct Floats {
  void* data = nullptr;
  FloatType type = FloatType::kF32;

  Floats() = default;  // defaulted: host and device already (an annotation here is nvcc warning 20012)
  CLEAVE_HOST_DEVICE Floats(std::nullptr_t) {}
  CLEAVE_HOST_DEVICE Floats(float* p) : data(p) {}
  CLEAVE_HOST_DEVICE Floats(__nv_bfloat16* p) : data(p), type(FloatType::kBF16) {}
  CLEAVE_HOST_DEVICE Floats(void* p, FloatType t) : data(p), type(t) {}
  CLEAVE_HOST_DEVICE bool bf16() const { return type == FloatType::kBF16; }
};

struct ConstFloats {
  const void* data = nullptr;
  FloatType type = FloatType::kF32;

  ConstFloats() = default;
  CLEAVE_HOST_DEVICE ConstFloats(std::nullptr_t) {}
  CLEAVE_HOST_DEVICE ConstFloats(const float* p) : data(p) {}
  CLEAVE_HOST_DEVICE ConstFloats(const __nv_bfloat16* p) : data(p), type(FloatType::kBF16) {}
  CLEAVE_HOST_DEVICE ConstFloats(const void* p, FloatType t) : data(p), type(t) {}
  CLEAVE_HOST_DEVICE ConstFloats(Floats f) : data(f.data), type(f.type) {}
  CLEAVE_HOST_DEVICE bool bf16() const { return type == FloatType::kBF16; }
};

}  // namespace cleave::kernels::cuda
