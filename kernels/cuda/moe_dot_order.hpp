// The order in which the routing weights' gradient adds a dot product's products (moe_combine_weight_grad,
// moe.cu), as a host/device helper, so a CPU test (tests/unit/cuda/moe_dot_order_test.cpp) checks it against the
// CPU twin's bits without a GPU.
//
// The contract is the CPU twin's `dot_group` (kernels/cpu/moe_paths.hpp, moe.hpp's order): kLanes partial sums, partial l taking the products of
// columns c = l (mod kLanes) below the last whole vector (d / kLanes * kLanes) in column order, each from 0; the
// partials added in lane order onto 0; then the tail columns one by one. The kernel's kLanes is the CPU kernel's,
// kMoeDotLanes (kernels/moe_dot_lanes.hpp: one constant both sides take, not derived from either side's compile
// flags): MoeKernelDotOrder. Every product is rounded before it is added, every add rounds (no FMA: the products come
// in already rounded, and the device adds are __fadd_rn). The order is written for any lane count of 4 or 8, so a
// test can show it is that many lanes' order.
//
// Use: the columns arrive in chunks [c0, c0 + columns) with c0 a multiple of kLanes (the kernel's 32-column tiles),
// add_chunk for each in order, then finish with the last chunk (its tail products).
#pragma once

#include <cstdint>

#include "kernels/cuda/floats.hpp"  // CLEAVE_HOST_DEVICE
#include "kernels/moe_dot_lanes.hpp"

// Unrolled on the device, so the partials stay in registers (a run-time index would put them in local memory); the
// host compiler (nvcc's host pass, the CPU test) would warn about an unknown pragma.
#if defined(__CUDA_ARCH__)
#define CLEAVE_MOE_UNROLL _Pragma("unroll")
#else
#define CLEAVE_MOE_UNROLL
#endif

namespace cleave::kernels::cuda {

CLEAVE_HOST_DEVICE inline float moe_add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

template <int kLanes>
struct MoeDotOrder {
  static_assert(kLanes == 4 || kLanes == 8, "one SSE/NEON or one AVX register of floats");
  float part[kLanes];

  CLEAVE_HOST_DEVICE MoeDotOrder() {
CLEAVE_MOE_UNROLL
    for (int l = 0; l < kLanes; ++l) part[l] = 0.0f;
  }

  // The columns of the whole vectors: [0, vector_end(d)).
  CLEAVE_HOST_DEVICE static int64_t vector_end(int64_t d) { return d / kLanes * kLanes; }

  // Of the chunk's products row[0, columns) (columns c0, c0 + 1, ...; c0 a multiple of kLanes), those of whole
  // vectors go to their partials; the tail (only in the last chunk) waits for finish.
  CLEAVE_HOST_DEVICE void add_chunk(const float* row, int columns, int64_t c0, int64_t d) {
    const int64_t in_vectors = vector_end(d) - c0;
    const int vector_cols = in_vectors < 0 ? 0 : (in_vectors < columns ? static_cast<int>(in_vectors) : columns);
    for (int j0 = 0; j0 < vector_cols; j0 += kLanes) {
CLEAVE_MOE_UNROLL
      for (int l = 0; l < kLanes; ++l) part[l] = moe_add_rn(part[l], row[j0 + l]);
    }
  }

  // The partials in lane order onto 0, then the tail products of the last chunk (row: its products, c0 its first
  // column; any row and c0 when d is 0).
  CLEAVE_HOST_DEVICE float finish(const float* last_row, int64_t last_c0, int64_t d) const {
    float sum = 0.0f;
CLEAVE_MOE_UNROLL
    for (int l = 0; l < kLanes; ++l) sum = moe_add_rn(sum, part[l]);
    for (int64_t c = vector_end(d); c < d; ++c) sum = moe_add_rn(sum, last_row[c - last_c0]);
    return sum;
  }
};

// The order moe_combine_weight_grad_kernel adds in: the CPU kernel's (kernels/cpu/moe.cpp takes the same constant).
using MoeKernelDotOrder = MoeDotOrder<kMoeDotLanes>;

}  // namespace cleave::kernels::cuda
