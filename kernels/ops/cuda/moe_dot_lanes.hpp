// The CPU twin's vector width for the CUDA routing weights' gradient (kernels/cuda/moe_dot_order.hpp): the CPU's
// moe_combine_weight_grad adds each dot product in kernels/cpu/vec_math.hpp's kLanes partial sums, so the CUDA
// kernel must be told that width to give the CPU's bits. Host code compiled with the CPU kernels' flags (an -mavx
// build has 8 lanes, baseline x86-64 and NEON 4).
#pragma once

#include "kernels/cpu/vec_math.hpp"

namespace cleave::ops::cuda_detail {

inline int moe_dot_lanes() { return static_cast<int>(kernels::cpu::detail::kLanes); }

}  // namespace cleave::ops::cuda_detail
