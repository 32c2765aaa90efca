// Floats / ConstFloats: a device pointer to f32 or bf16 elements that kernels read and write as f32. This is the
// CUDA side of the CPU backend's numerics contract (kernels/ops/cpu_f32_view.hpp): bf16 is storage only; every
// load widens exactly, all arithmetic and accumulation is f32, and every store rounds once to nearest even.
//
// Invariant: the dtype travels with the pointer, so one kernel instantiation serves every mix of f32 and bf16
// operands (the seam allows each tensor its own float dtype) and the build stays one kernel per op. The branch
// on the dtype is uniform across the grid. A float* or __nv_bfloat16* converts implicitly, so f32 callers pass
// plain pointers. Device-side load/store are in common.cuh.
#pragma once

#include <cuda_bf16.h>

#include <cstddef>

// Constructors usable in host and device code (this header is also compiled by the C++ compiler).
#if defined(__CUDACC__)
#define CLEAVE_HOST_DEVICE __host__ __device__
#else
#define CLEAVE_HOST_DEVICE
#endif

namespace cleave::kernels::cuda {

struct Floats {
  void* data = nullptr;
  bool bf16 = false;

  CLEAVE_HOST_DEVICE Floats() = default;
  CLEAVE_HOST_DEVICE Floats(std::nullptr_t) {}
  CLEAVE_HOST_DEVICE Floats(float* p) : data(p) {}
  CLEAVE_HOST_DEVICE Floats(__nv_bfloat16* p) : data(p), bf16(true) {}
  CLEAVE_HOST_DEVICE Floats(void* p, bool is_bf16) : data(p), bf16(is_bf16) {}
};

struct ConstFloats {
  const void* data = nullptr;
  bool bf16 = false;

  CLEAVE_HOST_DEVICE ConstFloats() = default;
  CLEAVE_HOST_DEVICE ConstFloats(std::nullptr_t) {}
  CLEAVE_HOST_DEVICE ConstFloats(const float* p) : data(p) {}
  CLEAVE_HOST_DEVICE ConstFloats(const __nv_bfloat16* p) : data(p), bf16(true) {}
  CLEAVE_HOST_DEVICE ConstFloats(const void* p, bool is_bf16) : data(p), bf16(is_bf16) {}
  CLEAVE_HOST_DEVICE ConstFloats(Floats f) : data(f.data), bf16(f.bf16) {}
};

}  // namespace cleave::kernels::cuda
