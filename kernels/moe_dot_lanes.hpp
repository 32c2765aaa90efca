// The MoE routing weights' gradient's partial sums per dot product: one definition that the CPU kernel
// (kernels/cpu/moe.cpp, every vector path) and the CUDA kernel (kernels/cuda/moe_dot_order.hpp, moe.cu) both take,
// so the two give the same bits whatever flags either file is compiled with.
//
// Invariant: a constant, never derived from compile flags (__AVX__, -march): a per-file -mavx on one side only
// cannot change one side's order of summation. moe.cpp static_asserts its partials' vector holds kMoeDotLanes floats
// and moe.cu instantiates its kernel at kMoeDotLanes; tests/unit/cuda/moe_dot_order_test.cpp checks the CUDA order's
// bits against the CPU kernel's. Changing it changes both sides' bits (4: one SSE/NEON register; wider vectors hold
// several dots' partials side by side, kernels/cpu/moe_paths.hpp). Pure and header-only, so nvcc may include it.
#pragma once

namespace cleave::kernels {

inline constexpr int kMoeDotLanes = 4;

}  // namespace cleave::kernels
